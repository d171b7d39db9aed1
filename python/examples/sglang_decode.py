"""SGLang's paged (decode) indexer stage in one call.

SGLang's NSA Indexer._get_topk_paged runs

    logits = deep_gemm.fp8_paged_mqa_logits(q_fp8, kv_cache_fp8, weights, seqlens_32, block_tables,
                                            schedule_metadata, max_seq_len, clean_logits=False)
    topk_result = metadata.topk_transform(logits, index_topk)

whose fused transform returns page-table indices: the KV-pool slot of each
selected token. This script builds a decode batch the way that function sees
it (the pool's index_k_with_scale_buffer [num_pages, 64 * 132] uint8, the
64-token page table, one new token per request, the head gate [T, H, 1]
carrying the q scale) and gets topk_result from
dsa_topk.sglang_indexer_topk_paged, without the logits.

Run from the repository root after building (README): python3 python/examples/sglang_decode.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402

H, D, INDEX_TOPK, PAGE = 64, 128, 2048, 64
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
device = "cuda"
torch.manual_seed(3)

seqlens = [700, 2048, 2049, 40000, 12345]  # per request, its new token included
B = len(seqlens)
pages = [-(-length // PAGE) for length in seqlens]
num_pages = sum(pages) + 100

# get_index_k_with_scale_buffer(): per page its 64 FP8 keys, then their fp32 scales.
k = torch.randn(num_pages * PAGE, D, device=device)
k_scale = k.abs().amax(dim=1) / FP8_MAX
k_fp8 = (k / k_scale[:, None]).to(FP8)
kv_cache_fp8 = torch.empty(num_pages, PAGE * (D + 4), dtype=torch.uint8, device=device)
kv_cache_fp8[:, : PAGE * D] = k_fp8.view(torch.uint8).view(num_pages, PAGE * D)
kv_cache_fp8[:, PAGE * D:] = k_scale.view(torch.uint8).view(num_pages, PAGE * 4)

# get_page_table_64(): each request's pages, anywhere in the pool.
page_table = torch.zeros(B, max(pages), dtype=torch.int32, device=device)
placed = torch.randperm(num_pages, device=device).int()
start = 0
for b, n in enumerate(pages):
    page_table[b, :n] = placed[start:start + n]
    start += n
seqlens_32 = torch.tensor(seqlens, dtype=torch.int32, device=device)

# q_fp8 [T, H, D] (one scale per token) and _get_logits_head_gate's weights
# [T, H, 1]: proj(x) * n_heads^-0.5 * q_scale * softmax_scale.
q = torch.randn(B, H, D, device=device)
q_scale = q.abs().amax(dim=(1, 2), keepdim=True) / FP8_MAX  # [T, 1, 1]
q_fp8 = (q / q_scale).to(FP8)
weights = (torch.randn(B, H, device=device) * H ** -0.5).unsqueeze(-1) * q_scale[:, :, :1] * D ** -0.5

topk_result = dsa_topk.sglang_indexer_topk_paged(q_fp8, kv_cache_fp8, weights, seqlens_32, page_table, INDEX_TOPK,
                                                 deterministic=True)

# Check: the unfused pipeline on the keys gathered in context order (score
# everything, per-row top-k of positions), then page_table_1 (page * 64 +
# offset), which is what the fused PAGED transform applies.
page_table_1, ks, ke, offset = [], [], [], 0
for b, length in enumerate(seqlens):
    p = torch.arange(length, device=device)
    page_table_1.append(page_table[b].long()[p // PAGE] * PAGE + p % PAGE)
    ks.append(offset)
    ke.append(offset + length)
    offset += length
slots = torch.cat(page_table_1)
ks = torch.tensor(ks, dtype=torch.int32, device=device)
ke = torch.tensor(ke, dtype=torch.int32, device=device)
logits = dsa_topk.indexer_scores(q_fp8, k_fp8.view(torch.uint8)[slots].view(FP8), k_scale[slots],
                                 weights.squeeze(-1), ks, ke)
positions = dsa_topk.topk(logits, ks, ke, INDEX_TOPK, deterministic=True)  # absolute: into `slots`
expected = torch.where(positions >= 0, slots[positions.long().clamp(min=0)].int(), positions)
same = torch.equal(topk_result.sort(dim=1).values, expected.sort(dim=1).values)

print(f"decode batch: {B} requests, a pool of {num_pages} pages of {PAGE}, top-{INDEX_TOPK}")
for b in range(B):
    print(f"  request {b}: {seqlens[b]} tokens -> {int((topk_result[b] >= 0).sum())} page-table indices, "
          f"e.g. {topk_result[b, :3].tolist()}")
print(f"matches the unfused pipeline mapped through page_table_1: {same}")
sys.exit(0 if same else 1)
