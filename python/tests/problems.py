"""Inputs and references for the dsa_topk pytest suite.

Generators (seeded, on the GPU) with the character of the library's own
(src/tools/generators.h, docs/design.md): model-like, ties, dead-relu and
small-integer inputs; range layouts causal, varlen, boundary and full. The
reference is the score formula of contract section 1 in float64, computed a
block of rows and a block of keys at a time so memory stays bounded.
"""

import random
from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
D = 128
DISTRIBUTIONS = ["model-like", "ties", "dead-relu", "small-integer"]
LAYOUTS = ["causal", "varlen", "boundary", "full"]

# Score accuracy against the float64 reference (docs/design.md, "Precision";
# tests/gpu/test_scoring.cu): |score - exact| <= 4e-4 * the row's max |exact|.
# Small-integer inputs are exact (every partial sum is representable).
ROW_MAX_BOUND = 4e-4


@dataclass
class Problem:
    q: torch.Tensor        # [T, H, D] float8_e4m3fn
    k: torch.Tensor        # [N, D] float8_e4m3fn
    k_scale: torch.Tensor  # [N] float32
    w: torch.Tensor        # [T, H] float32
    ks: torch.Tensor       # [T] int32
    ke: torch.Tensor       # [T] int32
    name: str = ""
    exact: bool = False    # small-integer inputs: fp32 scores equal the reference

    @property
    def T(self) -> int:
        return self.q.shape[0]

    @property
    def N(self) -> int:
        return self.k.shape[0]

    def inputs(self):
        return self.q, self.k, self.k_scale, self.w, self.ks, self.ke

    def clone(self) -> "Problem":
        return Problem(*(t.clone() for t in self.inputs()), name=self.name, exact=self.exact)


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def quantize_rows(x: torch.Tensor):
    """One fp32 scale per key row (amax / 448), as the engines' indexer caches do."""
    scale = x.abs().amax(dim=1).clamp_min(1e-4) / FP8_MAX
    return to_fp8(x / scale[:, None]), scale.float()


def make_values(dist: str, T: int, N: int, H: int, seed: int, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device)

    def randint(lo, hi, shape):
        return torch.randint(lo, hi, shape, generator=g, device=device)

    if dist == "model-like":
        q = to_fp8(randn(T, H, D))
        k, k_scale = quantize_rows(randn(N, D))
        w = randn(T, H) / H ** 0.5
    elif dist == "ties":
        # Keys from a pool of 8 rows (massively repeated scores); every 4th
        # query is all-zero (every score of the row equal).
        pool = randn(8, D)
        k, k_scale = quantize_rows(pool[randint(0, 8, (N,))])
        q = randn(T, H, D)
        q[3::4] = 0
        q = to_fp8(q)
        w = randn(T, H) / H ** 0.5
    elif dist == "dead-relu":
        # Non-negative keys (10 % drawn normal) against negatively biased
        # queries: most dot products < 0, so most scores are exactly 0.
        x = randn(N, D)
        live = torch.rand(N, generator=g, device=device) < 0.1
        k, k_scale = quantize_rows(torch.where(live[:, None], x, x.abs()))
        q = to_fp8(randn(T, H, D) - 0.6)
        w = randn(T, H).abs() / H ** 0.5
    elif dist == "small-integer":
        q = randint(-3, 4, (T, H, D)).float().to(FP8)
        k = randint(-3, 4, (N, D)).float().to(FP8)
        k_scale = torch.pow(2.0, randint(-2, 3, (N,)).float())
        choices = torch.tensor([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], device=device)
        w = choices[randint(0, len(choices), (T, H))]
    else:
        raise ValueError(f"unknown distribution {dist}")
    return q, k, k_scale.contiguous(), w.float().contiguous()


def make_ranges(layout: str, T: int, N: int, K: int, seed: int):
    """Per-row [ks, ke) as two lists."""
    rng = random.Random(seed)
    if layout == "causal":  # the last T tokens of one sequence of N
        assert T <= N
        return [0] * T, [N - T + t + 1 for t in range(T)]
    if layout == "full":
        return [0] * T, [N] * T
    if layout == "varlen":
        # A packed batch: sequences of random lengths summing to N, each with
        # its last few tokens as queries, causal inside the sequence.
        count = max(1, min(4, T))
        cuts = sorted(rng.sample(range(1, N), count - 1)) if count > 1 else []
        bounds = [0] + cuts + [N]
        queries = [T // count + (1 if i < T % count else 0) for i in range(count)]
        ks, ke = [], []
        for i in range(count):
            start, length = bounds[i], bounds[i + 1] - bounds[i]
            for j in range(queries[i]):
                end = start + max(1, length - queries[i] + j + 1)
                ks.append(start)
                ke.append(min(end, start + length))
        return ks, ke
    if layout == "boundary":  # lengths 0, 1, K-1, K, K+1 and random, anywhere in [0, N)
        assert N > K + 1
        lengths = [0, 1, K - 1, K, K + 1]
        ks, ke = [], []
        for t in range(T):
            length = lengths[t % 6] if t % 6 < 5 else rng.randint(0, N)
            start = rng.randint(0, N - length)
            ks.append(start)
            ke.append(start + length)
        return ks, ke
    raise ValueError(f"unknown layout {layout}")


def make_problem(dist: str, layout: str, T: int, N: int, H: int = 64, K: int = 2048, seed: int = 0,
                 device="cuda") -> Problem:
    q, k, k_scale, w = make_values(dist, T, N, H, seed, device)
    ks, ke = make_ranges(layout, T, N, K, seed)
    as_int = dict(dtype=torch.int32, device=device)
    return Problem(q, k, k_scale, w, torch.tensor(ks, **as_int), torch.tensor(ke, **as_int),
                   name=f"{dist}/{layout}/T{T}/N{N}/H{H}/seed{seed}", exact=dist == "small-integer")


# --------------------------------------------------------------- reference --

def reference_scores(p: Problem, t0: int, t1: int, key_block: int = 4096) -> torch.Tensor:
    """Rows [t0, t1) of the contract's scores in float64, [t1 - t0, N], -inf
    outside each row's range: FP8 decoded to float, dot over D, ReLU,
    weighted sum over heads, times k_scale."""
    q = p.q[t0:t1].float().double()                      # [r, H, D]
    w = p.w[t0:t1].double()                              # [r, H]
    out = torch.empty(t1 - t0, p.N, dtype=torch.float64, device=q.device)
    for s0 in range(0, p.N, key_block):
        s1 = min(s0 + key_block, p.N)
        k = p.k[s0:s1].float().double()                  # [c, D]
        dots = torch.einsum("rhd,cd->rhc", q, k)         # [r, H, c]
        heads = (dots.clamp_min(0) * w[:, :, None]).sum(dim=1)
        out[:, s0:s1] = heads * p.k_scale[s0:s1].double()
    cols = torch.arange(p.N, device=q.device)
    inside = (cols >= p.ks[t0:t1, None]) & (cols < p.ke[t0:t1, None])
    return out.masked_fill(~inside, float("-inf"))


def row_blocks(T: int, rows: int = 32):
    for t0 in range(0, T, rows):
        yield t0, min(t0 + rows, T)


MAGNITUDE_BOUND = 2.0 ** -9  # docs/design.md: |error| <= 2^-9 * k_scale sum_h |w_h| sum_d |q k|


def row_magnitude(p: Problem, t0: int, t1: int, key_block: int = 4096) -> torch.Tensor:
    """Per row, the largest magnitude k_scale[s] * sum_h |w_h| * sum_d |q_hd k_d|
    over the row's range, [r, 1] float64: the scale of the tensor cores'
    accumulation error (rows whose positive and negative head terms cancel
    have scores far below it)."""
    q = p.q[t0:t1].float().double().abs()
    w = p.w[t0:t1].double().abs()
    out = torch.zeros(t1 - t0, 1, dtype=torch.float64, device=q.device)
    for s0 in range(0, p.N, key_block):
        s1 = min(s0 + key_block, p.N)
        k = p.k[s0:s1].float().double().abs()
        mag = (torch.einsum("rhd,cd->rhc", q, k) * w[:, :, None]).sum(dim=1) * p.k_scale[s0:s1].double()
        cols = torch.arange(s0, s1, device=q.device)
        inside = (cols >= p.ks[t0:t1, None]) & (cols < p.ke[t0:t1, None])
        out = torch.maximum(out, mag.masked_fill(~inside, 0).amax(dim=1, keepdim=True))
    return out


def score_tolerance(ref: torch.Tensor, exact: bool, magnitude: torch.Tensor = None) -> torch.Tensor:
    """Per-row allowed |score - reference|, [r, 1]: 4e-4 of the row's max
    |score| or, when larger, 2^-9 of the row's largest magnitude (both
    documented in docs/design.md, "Precision")."""
    if exact:
        return torch.zeros(ref.shape[0], 1, dtype=ref.dtype, device=ref.device)
    finite = torch.where(torch.isfinite(ref), ref.abs(), torch.zeros_like(ref))
    tol = ROW_MAX_BOUND * finite.amax(dim=1, keepdim=True)
    if magnitude is not None:
        tol = torch.maximum(tol, MAGNITUDE_BOUND * magnitude)
    return tol


# ------------------------------------------------------------------ checks --

def absolute_indices(indices: torch.Tensor, ks: torch.Tensor, relative: bool) -> torch.Tensor:
    """int64 key indices, -1 kept."""
    idx = indices.long()
    if relative:
        idx = torch.where(idx >= 0, idx + ks.long()[:, None], idx)
    return idx


def check_selection_shape(indices: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, K: int, relative: bool):
    """Row t: min(K, len) distinct in-range indices, the other slots -1."""
    assert indices.dtype == torch.int32 and indices.shape == (ks.shape[0], K)
    idx = absolute_indices(indices, ks, relative)
    valid = idx >= 0
    length = (ke - ks).long()
    expect = length.clamp(max=K)
    assert torch.equal(valid.sum(dim=1), expect), "wrong number of valid indices per row"
    assert bool((indices[~valid] == -1).all()), "padding must be -1"
    lo, hi = ks.long()[:, None], ke.long()[:, None]
    assert bool(((idx >= lo) & (idx < hi))[valid].all()), "index outside its row's range"
    # Distinct: sort with invalid slots mapped to distinct negatives.
    fill = -2 - torch.arange(K, device=idx.device)
    ordered = torch.where(valid, idx, fill.expand_as(idx)).sort(dim=1).values
    assert bool((ordered[:, 1:] != ordered[:, :-1]).all()), "duplicate index in a row"
    return idx, valid


def check_topk_against_reference(p: Problem, indices: torch.Tensor, K: int, relative: bool = False):
    """The selected set is a true top-K of the reference up to the scoring
    tolerance: sorted descending, each reference score of the selection is at
    most twice the per-entry tolerance below the reference's own top-K score
    of the same rank (each side may be off by one tolerance). The other
    direction needs no check: a sorted subset of a row never exceeds the
    row's sorted top K rank by rank. Ties are free everywhere this allows, in
    particular at the K-th score."""
    idx, valid = check_selection_shape(indices, p.ks, p.ke, K, relative)
    for t0, t1 in row_blocks(p.T):
        ref = reference_scores(p, t0, t1)
        tol = score_tolerance(ref, p.exact, row_magnitude(p, t0, t1))
        kk = min(K, p.N)
        best = torch.topk(ref, kk, dim=1).values if kk > 0 else ref[:, :0]
        if kk < K:
            best = torch.cat([best, best.new_full((t1 - t0, K - kk), float("-inf"))], dim=1)
        v = valid[t0:t1]
        chosen = ref.gather(1, idx[t0:t1].clamp(min=0)).masked_fill(~v, float("-inf"))
        chosen = chosen.sort(dim=1, descending=True).values
        slots = torch.arange(K, device=ref.device) < v.sum(dim=1, keepdim=True)
        under = (chosen < best - 2 * tol) & slots
        if bool(under.any()):
            row = int(under.any(dim=1).nonzero()[0]) + t0
            raise AssertionError(f"{p.name}: row {row} selected a score below the top-K beyond the tolerance")


def sort_rows(x: torch.Tensor) -> torch.Tensor:
    return x.sort(dim=1).values


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)
