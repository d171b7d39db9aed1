"""SGLang's ragged (extend) indexer stage in one call.

SGLang's NSA Indexer._get_topk_ragged runs

    logits = deep_gemm.fp8_mqa_logits(q_fp8, kv_fp8, weights, ks, ke, clean_logits=False)
    topk_result = metadata.topk_transform(logits, index_topk, ks=ks)

This script builds an extend batch the way that function sees it (each
request's FP8 keys and fp32 scales concatenated, the head gate [T, H, 1]
already carrying the q scale and softmax scale, ks/ke from the metadata's
kv-cache range) and gets topk_result from dsa_topk.sglang_indexer_topk_ragged.

Run from the repository root after building (README): python3 python/examples/sglang_ragged.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402

H, D, INDEX_TOPK = 64, 128, 2048
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
device = "cuda"
torch.manual_seed(1)

seq_lens, extend_lens = [4000, 12000, 3000], [1000, 500, 3000]  # per request: total, new tokens
N, T = sum(seq_lens), sum(extend_lens)

# get_index_k_scale_buffer per request, concatenated: FP8 keys and fp32 scales.
k = torch.randn(N, D, device=device)
k_scale = k.abs().amax(dim=1) / FP8_MAX
kv_fp8 = ((k / k_scale[:, None]).to(FP8), k_scale)

# q_fp8 per token (one scale per token), and _get_logits_head_gate's weights:
# proj(x) * n_heads^-0.5 * q_scale * softmax_scale, shape [T, H, 1].
q = torch.randn(T, H, D, device=device)
q_scale = q.abs().amax(dim=(1, 2), keepdim=True) / FP8_MAX  # [T, 1, 1]
q_fp8 = (q / q_scale).to(FP8)
weights = (torch.randn(T, H, device=device) * H ** -0.5).unsqueeze(-1) * q_scale[:, :, :1] * D ** -0.5

# get_indexer_kvcache_range(): where each token's keys start and end in the
# concatenated keys (causal inside its request).
ks, ke, start = [], [], 0
for total, new in zip(seq_lens, extend_lens):
    for j in range(new):
        ks.append(start)
        ke.append(start + total - new + j + 1)
    start += total
ks = torch.tensor(ks, dtype=torch.int32, device=device)
ke = torch.tensor(ke, dtype=torch.int32, device=device)

topk_result = torch.full((T, INDEX_TOPK), -1, dtype=torch.int32, device=device)
dsa_topk.sglang_indexer_topk_ragged(q_fp8, kv_fp8, weights, ks, ke, INDEX_TOPK, out=topk_result,
                                    deterministic=True)

# Check: the unfused pipeline (score everything, then a per-row top-k with
# row_starts = ks) selects the same keys.
logits = dsa_topk.indexer_scores(q_fp8, kv_fp8[0], kv_fp8[1], weights.squeeze(-1), ks, ke)
expected = dsa_topk.topk(logits, ks, ke, INDEX_TOPK, relative=True, deterministic=True)
same = torch.equal(topk_result.sort(dim=1).values, expected.sort(dim=1).values)

print(f"extend batch: {len(seq_lens)} requests, T = {T} tokens, N = {N} concatenated keys, top-{INDEX_TOPK}")
print(f"  token 0 keeps {int((topk_result[0] >= 0).sum())} keys (its causal length is {int(ke[0] - ks[0])})")
print(f"  token {T - 1} keeps {int((topk_result[-1] >= 0).sum())} keys, e.g. {topk_result[-1, :4].tolist()}")
print(f"matches the unfused pipeline: {same}")
sys.exit(0 if same else 1)
