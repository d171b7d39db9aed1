"""The engine drop-ins: vLLM's prefill indexer stage and SGLang's ragged
indexer stage, each against this library's unfused pipeline and the
reference."""

import torch

import dsa_topk
from problems import check_topk_against_reference, make_problem, sort_rows

K = 2048


def relative_pipeline(p, deterministic=True):
    """What fp8_mqa_logits + a per-row top-k with row-relative output give."""
    scores = dsa_topk.indexer_scores(*p.inputs())
    return dsa_topk.topk(scores, p.ks, p.ke, K, relative=True, deterministic=deterministic)


def test_vllm_prefill_stage_fills_its_rows_of_the_buffer():
    p = make_problem("model-like", "varlen", T=96, N=20000, seed=60)
    # vLLM's persistent [max_num_batched_tokens, topk] buffer; this chunk's
    # rows are a contiguous block in the middle of it.
    buffer = torch.full((3 * p.T, K), -1, dtype=torch.int32, device="cuda")
    buffer[: p.T] = 4242
    buffer[2 * p.T:] = 4242
    rows = buffer[p.T: 2 * p.T, :K]
    ret = dsa_topk.vllm_indexer_topk_prefill(p.q, p.k, p.k_scale, p.w, p.ks, p.ke, rows, deterministic=True)
    assert ret is rows
    assert torch.equal(sort_rows(rows), sort_rows(relative_pipeline(p)))
    assert bool((buffer[: p.T] == 4242).all()) and bool((buffer[2 * p.T:] == 4242).all())
    # Default (any-tie) mode: a true top-K, checked against the reference.
    dsa_topk.vllm_indexer_topk_prefill(p.q, p.k, p.k_scale, p.w, p.ks, p.ke, rows)
    check_topk_against_reference(p, rows, K, relative=True)


def test_vllm_prefill_stage_without_keys():
    # A chunk whose gathered key count is 0 (vLLM fills -1 itself there).
    p = make_problem("model-like", "causal", T=8, N=4096, seed=61)
    zeros = torch.zeros_like(p.ks)
    rows = torch.full((p.T, K), 9, dtype=torch.int32, device="cuda")
    dsa_topk.vllm_indexer_topk_prefill(p.q, p.k[:0], p.k_scale[:0], p.w, zeros, zeros, rows)
    assert bool((rows == -1).all())


def test_sglang_ragged_stage():
    p = make_problem("dead-relu", "varlen", T=80, N=16000, seed=62)
    weights = p.w[:, :, None]  # SGLang keeps the head gate as [T, H, 1]
    got = dsa_topk.sglang_indexer_topk_ragged(p.q, (p.k, p.k_scale), weights, p.ks, p.ke, K, deterministic=True)
    assert got.shape == (p.T, K) and got.dtype == torch.int32
    assert torch.equal(sort_rows(got), sort_rows(relative_pipeline(p)))
    # Absolute indices into the concatenated keys (the RAGGED transform's
    # output when its offsets equal ks), written into a caller's buffer.
    topk_result = torch.full((p.T + 5, K), -1, dtype=torch.int32, device="cuda")
    dsa_topk.sglang_indexer_topk_ragged(p.q, (p.k, p.k_scale), weights, p.ks, p.ke, K, out=topk_result[: p.T],
                                        relative=False, deterministic=True)
    absolute = torch.where(got >= 0, got + p.ks[:, None], got)
    assert torch.equal(sort_rows(topk_result[: p.T]), sort_rows(absolute))
    assert bool((topk_result[p.T:] == -1).all())
    check_topk_against_reference(p, dsa_topk.sglang_indexer_topk_ragged(p.q, (p.k, p.k_scale), p.w, p.ks, p.ke, K),
                                 K, relative=True)
