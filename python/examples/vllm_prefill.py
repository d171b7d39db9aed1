"""vLLM's prefill indexer stage in one call.

vLLM's sparse_attn_indexer runs, per prefill chunk,

    logits = fp8_mqa_logits(q_fp8, (k_fp8, k_scale), weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=False)
    ops.top_k_per_row_prefill(logits, cu_seqlen_ks, cu_seqlen_ke, topk_indices, ...)

This script builds one chunk the way vLLM sees it (three requests with cached
context, keys gathered one request after another, FP8 with one fp32 scale per
key, the q scale folded into the head weights) and fills vLLM's topk_indices
rows with dsa_topk.vllm_indexer_topk_prefill instead.

Run from the repository root after building (README): python3 python/examples/vllm_prefill.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402

H, D, TOPK = 64, 128, 2048
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
device = "cuda"
torch.manual_seed(0)

# (cached context + new tokens, new tokens) per request of the chunk.
requests = [(6000, 300), (2500, 2500), (9000, 200)]
N = sum(total for total, _ in requests)  # gathered keys of the chunk
T = sum(new for _, new in requests)      # query rows: the new tokens

# Keys as vLLM's indexer cache holds them: FP8 rows with one fp32 scale each
# (cp_gather_indexer_k_quant_cache gathers them into k_fp8 / k_scale).
k = torch.randn(N, D, device=device)
k_scale = k.abs().amax(dim=1) / FP8_MAX
k_fp8 = (k / k_scale[:, None]).to(FP8)

# Queries: FP8 per (token, head); the q scale, softmax_scale and the head
# scale go into the fp32 weights, as vLLM's fused_indexer_q_rope_quant does.
q = torch.randn(T, H, D, device=device)
q_scale = q.abs().amax(dim=2) / FP8_MAX                  # [T, H]
q_fp8 = (q / q_scale[..., None]).to(FP8)
head_gate = torch.randn(T, H, device=device)
weights = head_gate * q_scale * D ** -0.5 * H ** -0.5    # [T, H] fp32

# cu_seqlen_ks/ke: each new token sees its own request's keys up to itself.
ks, ke, start = [], [], 0
for total, new in requests:
    for j in range(new):
        ks.append(start)
        ke.append(start + total - new + j + 1)
    start += total
cu_seqlen_ks = torch.tensor(ks, dtype=torch.int32, device=device)
cu_seqlen_ke = torch.tensor(ke, dtype=torch.int32, device=device)

# vLLM's persistent buffer; the chunk writes its rows.
topk_indices_buffer = torch.full((8192, TOPK), -1, dtype=torch.int32, device=device)
topk_indices = topk_indices_buffer[:T, :TOPK]

dsa_topk.vllm_indexer_topk_prefill(q_fp8, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke, topk_indices,
                                   deterministic=True)

# The same answer as scoring everything and selecting per row (the two-stage
# pipeline, here this library's own unfused kernels).
logits = dsa_topk.indexer_scores(q_fp8, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke)
expected = dsa_topk.topk(logits, cu_seqlen_ks, cu_seqlen_ke, TOPK, relative=True, deterministic=True)
same = torch.equal(topk_indices.sort(dim=1).values, expected.sort(dim=1).values)

valid = (topk_indices >= 0).sum(dim=1)
print(f"chunk: {len(requests)} requests, T = {T} query rows, N = {N} gathered keys, top-{TOPK}")
for row in (0, 299, 300, T - 1):
    print(f"  row {row:5d}: keys [{ks[row]}, {ke[row]}) -> {int(valid[row])} indices, "
          f"first {topk_indices[row, :4].tolist()} (relative to cu_seqlen_ks)")
print(f"matches the two-stage pipeline: {same}")
sys.exit(0 if same else 1)
