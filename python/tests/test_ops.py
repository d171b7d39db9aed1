"""Each op against the float64 reference of the score formula, and the fused
op against this library's own unfused pipeline (indexer_scores, then topk),
which must match it exactly."""

import pytest
import torch

import dsa_topk
from problems import (DISTRIBUTIONS, FP8, bits, check_selection_shape, check_topk_against_reference,
                      make_problem, make_ranges, reference_scores, row_blocks, row_magnitude, score_tolerance,
                      sort_rows)


# ------------------------------------------------------------ indexer_scores --

@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("layout", ["causal", "varlen"])
def test_indexer_scores_match_reference(dist, layout):
    p = make_problem(dist, layout, T=48, N=6000, seed=1)
    scores = dsa_topk.indexer_scores(*p.inputs())
    assert scores.dtype == torch.float32 and scores.shape == (p.T, p.N)
    for t0, t1 in row_blocks(p.T):
        ref = reference_scores(p, t0, t1)
        got = scores[t0:t1]
        inside = torch.isfinite(ref)
        # Outside each row's range the op's fill value, -inf, is untouched.
        assert bool((got[~inside] == float("-inf")).all())
        err = (got.double() - ref).abs().masked_fill(~inside, 0)
        tol = score_tolerance(ref, p.exact, row_magnitude(p, t0, t1))
        assert bool((err <= tol).all()), f"{p.name}: worst error {float(err.max()):.3g}"


def test_indexer_scores_heads_32_and_strided_keys():
    p = make_problem("model-like", "varlen", T=40, N=5000, H=32, seed=2)
    # k as a view into a wider buffer: rows 256 bytes apart.
    wide = torch.zeros(p.N, 256, device="cuda")
    wide[:, :128] = p.k.float()
    k_view = wide.to(FP8)[:, :128]
    assert k_view.stride(0) == 256
    dense = dsa_topk.indexer_scores(*p.inputs())
    strided = dsa_topk.indexer_scores(p.q, k_view, p.k_scale, p.w, p.ks, p.ke)
    assert torch.equal(bits(dense), bits(strided))
    ref = reference_scores(p, 0, p.T)
    err = (dense.double() - ref).abs().masked_fill(~torch.isfinite(ref), 0)
    assert bool((err <= score_tolerance(ref, False, row_magnitude(p, 0, p.T))).all())


@pytest.mark.parametrize("layout", ["causal", "varlen", "boundary"])
def test_indexer_scores_clean_fills_only_outside(layout):
    """clean=True (the default) gives -inf outside every range and the range's
    scores inside; clean=False gives the same bits inside (that it writes
    nothing outside is the C++ GPU test's to check: the op allocates its
    own output)."""
    p = make_problem("model-like", layout, T=40, N=3000, seed=4)
    clean = dsa_topk.indexer_scores(*p.inputs())
    cols = torch.arange(p.N, device="cuda")
    inside = (cols[None, :] >= p.ks[:, None].long()) & (cols[None, :] < p.ke[:, None].long())
    assert bool((clean[~inside] == float("-inf")).all())
    assert bool(torch.isfinite(clean[inside]).all())
    raw = dsa_topk.indexer_scores(*p.inputs(), clean=False)
    assert torch.equal(bits(raw[inside]), bits(clean[inside]))


# -------------------------------------------------------------- indexer_topk --

CASES = [(dist, layout, K) for dist in DISTRIBUTIONS
         for layout, K in [("causal", 2048), ("varlen", 1024), ("boundary", 512)]]


@pytest.mark.parametrize("dist,layout,K", CASES)
def test_indexer_topk_matches_reference(dist, layout, K):
    p = make_problem(dist, layout, T=64, N=12000, K=K, seed=3)
    indices = dsa_topk.indexer_topk(*p.inputs(), K)
    check_topk_against_reference(p, indices, K)


@pytest.mark.parametrize("dist,layout,K", CASES)
def test_indexer_topk_is_exact_on_its_own_scores(dist, layout, K):
    """Fused == select(unfused scores): identical index sets and values in
    deterministic mode; in the default mode the same score multiset, and
    every returned value is the unfused score of its index, bit for bit."""
    p = make_problem(dist, layout, T=64, N=12000, K=K, seed=4)
    scores = dsa_topk.indexer_scores(*p.inputs())
    want_idx, want_val = dsa_topk.topk(scores, p.ks, p.ke, K, deterministic=True, sorted=True, return_values=True)
    idx, val = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True, sorted=True, return_values=True)
    assert torch.equal(idx, want_idx)
    assert torch.equal(bits(val), bits(want_val))

    idx, val = dsa_topk.indexer_topk(*p.inputs(), K, return_values=True)
    absolute, valid = check_selection_shape(idx, p.ks, p.ke, K, relative=False)
    own = scores.gather(1, absolute.clamp(min=0)).masked_fill(~valid, float("-inf"))
    assert torch.equal(bits(val), bits(own)), "values must be the scores of the returned indices"
    assert torch.equal(sort_rows(val), sort_rows(want_val))  # as numbers: -0 ties +0


def test_indexer_topk_options():
    p = make_problem("ties", "varlen", T=64, N=9000, K=1024, seed=5)
    K = 1024
    base, base_val = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True, return_values=True)
    rel = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True, relative=True)
    assert torch.equal(sort_rows(torch.where(base >= 0, base - p.ks[:, None], base)), sort_rows(rel))
    # Sorted: values descending, equal values by ascending index (deterministic).
    idx, val = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True, sorted=True, return_values=True)
    assert torch.equal(sort_rows(idx), sort_rows(base))
    v = val.double()
    assert bool((v[:, 1:] <= v[:, :-1]).all())
    tie = (val[:, 1:] == val[:, :-1]) & (idx[:, 1:] >= 0)
    assert bool((idx[:, 1:] > idx[:, :-1])[tie].all())
    # Deterministic runs are bit-identical and independent of the batch.
    again = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True)
    assert torch.equal(again, base)
    rows = slice(10, 30)
    part = dsa_topk.indexer_topk(p.q[rows], p.k, p.k_scale, p.w[rows], p.ks[rows], p.ke[rows], K,
                                 deterministic=True)
    assert torch.equal(sort_rows(part), sort_rows(base[rows]))


def test_indexer_topk_out_writes_the_callers_buffer():
    p = make_problem("model-like", "causal", T=64, N=8192, seed=6)
    K = 2048
    indices = torch.full((p.T, K), 12345, dtype=torch.int32, device="cuda")
    values = torch.full((p.T, K), 7.0, device="cuda")
    ret = dsa_topk.indexer_topk_out(*p.inputs(), indices, values, deterministic=True)
    assert ret is indices
    want_idx, want_val = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=True, return_values=True)
    assert torch.equal(indices, want_idx)
    assert torch.equal(bits(values), bits(want_val))
    # Through the op itself, without values.
    indices.fill_(12345)
    torch.ops.dsa_topk.indexer_topk_out(*p.inputs(), indices, deterministic=True)
    assert torch.equal(indices, want_idx)


def test_indexer_topk_edge_shapes():
    K = 512
    p = make_problem("model-like", "boundary", T=12, N=3000, K=K, seed=7)
    check_topk_against_reference(p, dsa_topk.indexer_topk(*p.inputs(), K), K)
    # No rows.
    empty = dsa_topk.indexer_topk(p.q[:0], p.k, p.k_scale, p.w[:0], p.ks[:0], p.ke[:0], K)
    assert empty.shape == (0, K)
    # No keys: every row empty, all -1.
    zeros = torch.zeros_like(p.ks)
    none = dsa_topk.indexer_topk(p.q, p.k[:0], p.k_scale[:0], p.w, zeros, zeros, K)
    assert bool((none == -1).all())


# ---------------------------------------------------------------------- topk --

def make_scores(kind: str, T: int, N: int, seed: int):
    """fp32 [T, N + pad] with NaN poison in the padding columns, and the
    [T, N] view the op reads (row stride N + pad)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, N, generator=g, device="cuda")
    if kind == "ties":
        x = torch.randint(0, 8, (T, N), generator=g, device="cuda").float()
    elif kind == "dead-relu":
        x = (x - 1.5).clamp_min(0)  # mostly exact zeros
    buffer = torch.full((T, N + 37), float("nan"), device="cuda")
    buffer[:, :N] = x
    return buffer, buffer[:, :N]


def reference_topk_sets(scores: torch.Tensor, ks, ke, K: int):
    """Smallest-index tie-break selection per row (stable sort), padded with -1."""
    T, N = scores.shape
    cols = torch.arange(N, device=scores.device)
    inside = (cols >= ks[:, None]) & (cols < ke[:, None])
    masked = scores.masked_fill(~inside, float("-inf"))
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :K]
    if order.shape[1] < K:
        order = torch.cat([order, order.new_full((T, K - order.shape[1]), -1)], dim=1)
    count = (ke - ks).long().clamp(max=K)
    slots = torch.arange(K, device=scores.device) < count[:, None]
    return sort_rows(torch.where(slots, order, torch.full_like(order, -1)))


@pytest.mark.parametrize("kind", ["normal", "ties", "dead-relu"])
@pytest.mark.parametrize("layout,K", [("causal", 2048), ("varlen", 512), ("boundary", 1024)])
def test_topk_matches_torch(kind, layout, K):
    T, N = 64, 10000
    buffer, scores = make_scores(kind, T, N, seed=8)
    ks_list, ke_list = make_ranges(layout, T, N, K, seed=8)
    ks = torch.tensor(ks_list, dtype=torch.int32, device="cuda")
    ke = torch.tensor(ke_list, dtype=torch.int32, device="cuda")
    want = reference_topk_sets(scores, ks, ke, K)
    idx = dsa_topk.topk(scores, ks, ke, K, deterministic=True)
    assert torch.equal(sort_rows(idx.long()), want)
    # Default ties: the same score multiset.
    idx, val = dsa_topk.topk(scores, ks, ke, K, return_values=True)
    absolute, valid = check_selection_shape(idx, ks, ke, K, relative=False)
    assert torch.equal(bits(val), bits(scores.gather(1, absolute.clamp(min=0)).masked_fill(~valid, float("-inf"))))
    want_val = scores.gather(1, want.clamp(min=0)).masked_fill(want < 0, float("-inf"))
    assert torch.equal(sort_rows(val), sort_rows(want_val))  # as numbers: -0 ties +0
    # num_cols on the full buffer: same result, padding never read.
    rel = dsa_topk.topk(buffer, ks, ke, K, num_cols=N, deterministic=True, relative=True)
    assert torch.equal(sort_rows(absolute_from(rel, ks)), want)


def absolute_from(rel: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    rel = rel.long()
    return torch.where(rel >= 0, rel + ks.long()[:, None], rel)
