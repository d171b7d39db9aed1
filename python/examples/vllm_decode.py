"""vLLM's decode indexer stage in one call.

vLLM's sparse_attn_indexer runs, per decode step,

    logits = fp8_paged_mqa_logits(q_fp8, kv_cache, weights, seq_lens, block_table, schedule_metadata,
                                  max_model_len, clean_logits=False)
    ops.top_k_per_row_decode(logits, next_n, seq_lens, topk_indices, ...)

This script builds a decode batch the way that function sees it (the layer's
paged indexer cache [num_blocks, 64, 132] uint8 as indexer_k_quant_and_cache
fills it: per block its 64 FP8 keys, then their 64 fp32 scales; the requests'
blocks scattered over the cache; two query tokens per request, as with MTP;
the q scale folded into the head weights) and fills vLLM's topk_indices rows
with dsa_topk.vllm_indexer_topk_decode instead, without the logits.

Run from the repository root after building (README): python3 python/examples/vllm_decode.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402

H, D, TOPK, BLOCK, NEXT_N = 64, 128, 2048, 64, 2
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
device = "cuda"
torch.manual_seed(2)

context = [1500, 9000, 2049, 30000]  # per request: cached tokens plus its NEXT_N new ones
B = len(context)
blocks = [-(-length // BLOCK) for length in context]
num_blocks = sum(blocks) + 32  # the rest of the cache belongs to other requests

# The cache: one fp32 scale per key, each block's key bytes then its scales.
k = torch.randn(num_blocks * BLOCK, D, device=device)
k_scale = k.abs().amax(dim=1) / FP8_MAX
k_fp8 = (k / k_scale[:, None]).to(FP8)
kv_cache = torch.empty(num_blocks, BLOCK, D + 4, dtype=torch.uint8, device=device)
pages = kv_cache.view(num_blocks, BLOCK * (D + 4))
pages[:, : BLOCK * D] = k_fp8.view(torch.uint8).view(num_blocks, BLOCK * D)
pages[:, BLOCK * D:] = k_scale.view(torch.uint8).view(num_blocks, BLOCK * 4)

# The block table: rows of the persistent [max_num_reqs, max_model_len / 64]
# table, each request's blocks in random places.
table_buffer = torch.zeros(16, 2048, dtype=torch.int32, device=device)
placed = torch.randperm(num_blocks, device=device).int()
start = 0
for b, n in enumerate(blocks):
    table_buffer[b, :n] = placed[start:start + n]
    start += n
block_table = table_buffer[:B]
seq_lens = torch.tensor(context, dtype=torch.int32, device=device)

# Queries: FP8 per (token, head), the q scale and softmax / head scales in
# the fp32 weights (fused_indexer_q_rope_quant).
q = torch.randn(B, NEXT_N, H, D, device=device)
q_scale = q.abs().amax(dim=3) / FP8_MAX                            # [B, NEXT_N, H]
q_fp8 = (q / q_scale[..., None]).to(FP8)
weights = torch.randn(B * NEXT_N, H, device=device) * q_scale.view(B * NEXT_N, H) * D ** -0.5 * H ** -0.5

# vLLM's persistent buffer; decode writes its first B * NEXT_N rows.
topk_indices_buffer = torch.full((1024, TOPK), -1, dtype=torch.int32, device=device)
topk_indices = topk_indices_buffer[: B * NEXT_N]
dsa_topk.vllm_indexer_topk_decode(q_fp8, kv_cache, weights, seq_lens, block_table, topk_indices,
                                  deterministic=True)

# The same answer as scoring everything and selecting per row (the two-stage
# pipeline, here this library's own unfused kernels), on the keys gathered
# in context order as cp_gather_indexer_k_quant_cache would.
slots, ks, ke, offset = [], [], [], 0
for b, length in enumerate(context):
    p = torch.arange(length, device=device)
    slots.append(block_table[b].long()[p // BLOCK] * BLOCK + p % BLOCK)
    for j in range(NEXT_N):
        ks.append(offset)
        ke.append(offset + length - NEXT_N + j + 1)
    offset += length
slots = torch.cat(slots)
ks = torch.tensor(ks, dtype=torch.int32, device=device)
ke = torch.tensor(ke, dtype=torch.int32, device=device)
k_gathered = k_fp8.view(torch.uint8)[slots].view(FP8)
logits = dsa_topk.indexer_scores(q_fp8.view(B * NEXT_N, H, D), k_gathered, k_scale[slots], weights, ks, ke)
expected = dsa_topk.topk(logits, ks, ke, TOPK, relative=True, deterministic=True)
same = torch.equal(topk_indices.sort(dim=1).values, expected.sort(dim=1).values)

valid = (topk_indices >= 0).sum(dim=1)
print(f"decode batch: {B} requests x next_n = {NEXT_N}, cache of {num_blocks} blocks of {BLOCK}, top-{TOPK}")
for row in range(0, B * NEXT_N, 3):
    b, j = divmod(row, NEXT_N)
    print(f"  row {row} (request {b}, token {j}): {int(ke[row] - ks[row])} positions -> {int(valid[row])} kept, "
          f"first {topk_indices[row, :4].tolist()}")
print(f"matches the two-stage pipeline: {same}")
sys.exit(0 if same else 1)
