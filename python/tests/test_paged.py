"""The decode operators through PyTorch.

indexer_topk_paged against the prefill operator on the same keys gathered
into a contiguous k (ks = the request's offset, ke = offset + len(b, j),
relative indices): identical indices and bit-identical values in
deterministic mode, over block sizes, next_n, head counts, K, 1-D and 2-D
lengths and the length boundaries; physical slots, the _out op, CUDA graphs,
torch.compile and the argument errors. merge_topk against a brute-force
merge in torch, and the merge of per-slice prefill results against the
whole-range result. The engines' decode drop-ins at the end.
"""

import itertools
import random
from dataclasses import dataclass

import pytest
import torch

import dsa_topk
from problems import (D, DISTRIBUTIONS, FP8, Problem, bits, check_selection_shape, check_topk_against_reference,
                      make_problem, make_values, sort_rows)

SLOT_BYTES = D + 4  # a cache slot: D FP8 key bytes and one fp32 scale
LONG = 20000        # the long context of the length boundaries
POISON = 1 << 30    # table columns past the table's width: never read


# ------------------------------------------------------------ paged batches --

@dataclass
class Paged:
    """A decode batch over a paged cache, with the key of every cache slot."""
    q: torch.Tensor             # [B, next_n, H, D] float8_e4m3fn
    kv_cache: torch.Tensor      # [num_blocks, block_size * SLOT_BYTES] uint8
    block_table: torch.Tensor   # [B, width] int32, a view whose row stride exceeds width
    context_lens: torch.Tensor  # [B] or [B, next_n] int32
    w: torch.Tensor             # [B * next_n, H] float32
    k: torch.Tensor             # [num_blocks * block_size, D] float8_e4m3fn: slot s's key
    k_scale: torch.Tensor       # [num_blocks * block_size] float32
    block_size: int
    name: str = ""

    @property
    def B(self) -> int:
        return self.q.shape[0]

    @property
    def next_n(self) -> int:
        return self.q.shape[1]

    @property
    def rows(self) -> int:
        return self.B * self.next_n

    def inputs(self):
        return self.q, self.kv_cache, self.block_table, self.context_lens, self.w

    def row_lengths(self) -> torch.Tensor:
        """len(b, j) of row b * next_n + j, int32 [B * next_n]."""
        if self.context_lens.dim() == 2:
            return self.context_lens.reshape(-1).clone()
        j = torch.arange(self.next_n, dtype=torch.int32, device=self.q.device)
        return (self.context_lens[:, None] - self.next_n + j + 1).clamp(min=0).reshape(-1).int()

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """The cache slots of row-local positions [B * next_n, K], -1 kept."""
        bs = self.block_size
        request = torch.arange(self.rows, device=positions.device)[:, None] // self.next_n
        p = positions.long().clamp(min=0)
        block = self.block_table.long()[request, p // bs]
        return torch.where(positions >= 0, block * bs + p % bs, -1).int()

    def gathered(self) -> Problem:
        """The same rows as a prefill problem: each request's positions
        [0, max_j len(b, j)) gathered from the cache into one contiguous k,
        request after request, row (b, j) ranging over [offset_b, offset_b +
        len(b, j)); relative indices are then positions."""
        lengths = self.row_lengths().view(self.B, self.next_n).long()
        spans = lengths.amax(dim=1).tolist()
        offsets = [0]
        slots = []
        for b, span in enumerate(spans):
            p = torch.arange(span, device=self.q.device)
            slots.append(self.block_table[b].long()[p // self.block_size] * self.block_size + p % self.block_size)
            offsets.append(offsets[-1] + span)
        slots = torch.cat(slots)
        # Indexing runs on the bytes: FP8 tensors have no index kernel everywhere.
        k = self.k.view(torch.uint8)[slots].view(FP8)
        start = torch.tensor(offsets[:-1], device=self.q.device).repeat_interleave(self.next_n)
        ks = start.int()
        ke = (start + lengths.reshape(-1)).int()
        return Problem(self.q.reshape(self.rows, *self.q.shape[2:]), k, self.k_scale[slots], self.w, ks, ke,
                       name=f"{self.name}/gathered")


def pack_cache(k: torch.Tensor, k_scale: torch.Tensor, block_size: int) -> torch.Tensor:
    """The engines' cache layout, [num_blocks, block_size * SLOT_BYTES] uint8:
    per block its block_size x D key bytes, then its block_size fp32 scales."""
    num_blocks = k.shape[0] // block_size
    cache = torch.empty(num_blocks, block_size * SLOT_BYTES, dtype=torch.uint8, device=k.device)
    cache[:, : block_size * D] = k.view(torch.uint8).reshape(num_blocks, block_size * D)
    cache[:, block_size * D:] = k_scale.view(torch.uint8).reshape(num_blocks, block_size * 4)
    return cache


def make_paged(dist: str, B: int, next_n: int, H: int, block_size: int, lengths, per_token: bool, seed: int, *,
               num_blocks: int = None, width: int = None, device="cuda") -> Paged:
    """A decode batch with context_lens `lengths` ([B] or [B][next_n] nested
    lists). Each request's blocks are distinct cache blocks in random order;
    the table is `width` wide (default: 2 more than the widest request
    needs), entries past a request's blocks are -1, and it is a view into a
    buffer whose columns past `width` hold POISON. The cache holds
    `num_blocks` blocks (default: 3 more than the requests use), the spare
    ones random keys that no row may see."""
    rng = random.Random(seed)
    spans = [max(row) if per_token else row for row in lengths]
    needed = [-(-max(span, 0) // block_size) for span in spans]
    width = max(needed, default=0) + 2 if width is None else width
    num_blocks = sum(needed) + 3 if num_blocks is None else num_blocks
    assert max(needed, default=0) <= width and sum(needed) <= num_blocks
    order = list(range(num_blocks))
    rng.shuffle(order)
    table = torch.full((B, width + 5), -1, dtype=torch.int32)
    table[:, width:] = POISON
    used = 0
    for b, n in enumerate(needed):
        table[b, :n] = torch.tensor(order[used:used + n], dtype=torch.int32)
        used += n
    q, k, k_scale, w = make_values(dist, B * next_n, num_blocks * block_size, H, seed, device)
    name = f"{dist}/B{B}/next_n{next_n}/H{H}/bs{block_size}/{'2d' if per_token else '1d'}/seed{seed}"
    return Paged(q.view(B, next_n, H, D), pack_cache(k, k_scale, block_size), table.to(device)[:, :width],
                 torch.tensor(lengths, dtype=torch.int32, device=device), w, k, k_scale, block_size, name)


def boundary_lengths(B: int, next_n: int, per_token: bool, K: int, seed: int):
    """context_lens holding 0, 1, K-1, K, K+1, LONG and a random length (per
    token for 2-D; with 1-D lengths the next_n rows of a request then see
    the lengths just below its own)."""
    rng = random.Random(seed)
    pool = [0, 1, K - 1, K, K + 1, LONG]

    def pick(i):
        return pool[i] if i < len(pool) else rng.randint(0, 3 * K)

    if per_token:
        start = rng.randrange(len(pool) + 1)
        return [[pick((start + b * next_n + j) % (len(pool) + 1)) for j in range(next_n)] for b in range(B)]
    if B == 1:
        return [rng.choice([K + 1, LONG])]
    return [pick(b % (len(pool) + 1)) for b in range(B)]


# Every block size x next_n x 1-D/2-D lengths, H, K and B drawn per case; then
# every H x K x B at one block size.
SWEEP = []
for i, (bs, next_n, per_token) in enumerate(itertools.product((16, 32, 64, 128), (1, 2, 4, 8), (False, True))):
    pick = random.Random(100 + i)
    SWEEP.append((bs, next_n, per_token, pick.choice((32, 64)), pick.choice((512, 2048)), pick.choice((1, 7)),
                  DISTRIBUTIONS[(i // 2) % len(DISTRIBUTIONS)], i))
for i, (H, K, B) in enumerate(itertools.product((32, 64), (512, 2048), (1, 7))):
    SWEEP.append((64, 2, i % 2 == 1, H, K, B, DISTRIBUTIONS[i % len(DISTRIBUTIONS)], 200 + i))
SWEEP_IDS = [f"bs{c[0]}-n{c[1]}-{'2d' if c[2] else '1d'}-H{c[3]}-K{c[4]}-B{c[5]}-{c[6]}" for c in SWEEP]


@pytest.mark.parametrize("block_size,next_n,per_token,H,K,B,dist,seed", SWEEP, ids=SWEEP_IDS)
def test_paged_matches_prefill_on_gathered_keys(block_size, next_n, per_token, H, K, B, dist, seed):
    lengths = boundary_lengths(B, next_n, per_token, K, seed)
    pp = make_paged(dist, B, next_n, H, block_size, lengths, per_token, seed)
    pre = pp.gathered()
    want, want_val = dsa_topk.indexer_topk(*pre.inputs(), K, relative=True, deterministic=True, sorted=True,
                                           return_values=True)
    idx, val = dsa_topk.indexer_topk_paged(*pp.inputs(), K, deterministic=True, sorted=True, return_values=True)
    assert idx.shape == (pp.rows, K) and idx.dtype == torch.int32
    assert torch.equal(idx, want), pp.name
    assert torch.equal(bits(val), bits(want_val)), pp.name
    # Cache slots: the same selection, mapped through the table.
    slots = dsa_topk.indexer_topk_paged(*pp.inputs(), K, physical_slots=True, deterministic=True, sorted=True)
    assert torch.equal(slots, pp.slots(want)), pp.name
    # Unsorted: the same sets.
    idx = dsa_topk.indexer_topk_paged(*pp.inputs(), K, deterministic=True)
    assert torch.equal(sort_rows(idx), sort_rows(want)), pp.name
    # Default ties: a valid selection whose values are the scores of its
    # positions, with the deterministic selection's score multiset.
    idx, val = dsa_topk.indexer_topk_paged(*pp.inputs(), K, return_values=True)
    lengths = pp.row_lengths()
    positions, valid = check_selection_shape(idx, torch.zeros_like(lengths), lengths, K, relative=False)
    if pre.N > 0:
        scores = dsa_topk.indexer_scores(*pre.inputs())
        own = scores.gather(1, torch.where(valid, pre.ks.long()[:, None] + positions, 0))
        assert torch.equal(bits(val), bits(own.masked_fill(~valid, float("-inf")))), pp.name
    assert torch.equal(sort_rows(val), sort_rows(want_val)), pp.name  # as numbers: -0 ties +0


@pytest.mark.parametrize("dist,per_token,block_size,next_n", [("small-integer", False, 64, 2),
                                                              ("model-like", True, 16, 4),
                                                              ("dead-relu", False, 128, 1)])
def test_paged_matches_reference(dist, per_token, block_size, next_n):
    K = 512
    pp = make_paged(dist, 7, next_n, 64, block_size, boundary_lengths(7, next_n, per_token, K, 7), per_token, 7)
    indices = dsa_topk.indexer_topk_paged(*pp.inputs(), K)
    check_topk_against_reference(pp.gathered(), indices, K, relative=True)


def test_paged_layouts_give_the_same_result():
    """The cache as [num_blocks, block_size, 132] (vLLM) or [num_blocks,
    block_size * 132] (SGLang), w as [B * next_n, H] or [B, next_n, H], the
    table strided or not, 1-D lengths or their 2-D expansion: one result.
    Table entries past a request's blocks are never read, even with the
    range check."""
    B, next_n, H, bs, K = 5, 4, 64, 32, 1024
    pp = make_paged("ties", B, next_n, H, bs, boundary_lengths(B, next_n, False, K, 11), False, 11)
    want = dsa_topk.indexer_topk_paged(*pp.inputs(), K, deterministic=True, sorted=True)
    unused = pp.block_table.clone()
    unused[unused < 0] = POISON
    variants = {
        "3-D cache": (pp.kv_cache.view(-1, bs, SLOT_BYTES), pp.block_table, pp.context_lens, pp.w),
        "3-D w, contiguous table": (pp.kv_cache, pp.block_table.contiguous(), pp.context_lens, pp.w.view(B, next_n, H)),
        "2-D lengths": (pp.kv_cache, pp.block_table, pp.row_lengths().view(B, next_n), pp.w),
        "unused entries out of range": (pp.kv_cache, unused, pp.context_lens, pp.w),
    }
    for name, (kv_cache, table, lens, w) in variants.items():
        got = dsa_topk.indexer_topk_paged(pp.q, kv_cache, table, lens, w, K, deterministic=True, sorted=True)
        assert torch.equal(got, want), name


def test_paged_out_writes_the_callers_buffers():
    """Into the first rows of persistent buffers (the rows after them stay
    untouched), positions or slots, with values and through the op itself
    without them."""
    B, next_n, K = 7, 2, 2048
    pp = make_paged("model-like", B, next_n, 64, 64, boundary_lengths(B, next_n, True, K, 12), True, 12)
    index_buffer = torch.full((pp.rows + 4, K), 12345, dtype=torch.int32, device="cuda")
    value_buffer = torch.full((pp.rows + 4, K), 7.0, device="cuda")
    indices, values = index_buffer[: pp.rows], value_buffer[: pp.rows]
    for physical_slots in (False, True):
        want_idx, want_val = dsa_topk.indexer_topk_paged(*pp.inputs(), K, physical_slots=physical_slots,
                                                         deterministic=True, return_values=True)
        ret = dsa_topk.indexer_topk_paged_out(*pp.inputs(), indices, values, physical_slots=physical_slots,
                                              deterministic=True)
        assert ret is indices
        assert torch.equal(indices, want_idx) and torch.equal(bits(values), bits(want_val))
        indices.fill_(12345)
        torch.ops.dsa_topk.indexer_topk_paged_out(*pp.inputs(), indices, physical_slots=physical_slots,
                                                  deterministic=True)
        assert torch.equal(indices, want_idx)
    assert bool((index_buffer[pp.rows:] == 12345).all()) and bool((value_buffer[pp.rows:] == 7.0).all())


def test_paged_edge_shapes():
    K = 512
    # Every length 0: every slot -1, every value -inf.
    pp = make_paged("model-like", 3, 2, 64, 16, [0, 0, 0], False, 13)
    idx, val = dsa_topk.indexer_topk_paged(*pp.inputs(), K, return_values=True)
    assert bool((idx == -1).all()) and bool((val == float("-inf")).all())
    # No requests.
    empty = dsa_topk.indexer_topk_paged(pp.q[:0], pp.kv_cache, pp.block_table[:0], pp.context_lens[:0], pp.w[:0], K)
    assert empty.shape == (0, K)
    # One request, next_n = 8, lengths below next_n: the first rows see nothing.
    pp = make_paged("ties", 1, 8, 32, 128, [5], False, 14)
    idx = dsa_topk.indexer_topk_paged(*pp.inputs(), K, deterministic=True)
    assert (idx >= 0).sum(dim=1).tolist() == [0, 0, 0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------- runtime --

def capture(step):
    """A CUDA graph of step(), warmed up on a side stream first, and what the
    captured step returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


@pytest.mark.parametrize("per_token", [False, True])
def test_paged_cuda_graph_replay_with_new_lengths_and_tables(per_token):
    B, next_n, H, bs, K, width = 7, 2, 64, 64, 2048, 80

    def batch(seed):
        rng = random.Random(seed)
        pool = [0, 1, K - 1, K, K + 1, width * bs, rng.randint(0, width * bs)]
        lengths = ([[rng.choice(pool) for _ in range(next_n)] for _ in range(B)] if per_token
                   else [rng.choice(pool) for _ in range(B)])
        return make_paged(DISTRIBUTIONS[seed % len(DISTRIBUTIONS)], B, next_n, H, bs, lengths, per_token, seed,
                          num_blocks=B * width, width=width)

    static = batch(70)
    indices = torch.full((static.rows, K), -7, dtype=torch.int32, device="cuda")
    values = torch.zeros(static.rows, K, device="cuda")

    def step():
        dsa_topk.indexer_topk_paged_out(*static.inputs(), indices, values, deterministic=True, check_ranges=False)
        return dsa_topk.indexer_topk_paged(*static.inputs(), K, physical_slots=True, deterministic=True, sorted=True,
                                           check_ranges=False)

    graph, slots = capture(step)
    for seed in (71, 72, 73):
        fresh = batch(seed)
        for dst, src in zip(static.inputs(), fresh.inputs()):
            dst.copy_(src)  # the table in place: its row stride stays
        graph.replay()
        torch.cuda.synchronize()
        want, want_val = dsa_topk.indexer_topk_paged(*fresh.inputs(), K, deterministic=True, return_values=True)
        assert torch.equal(indices, want), fresh.name
        assert torch.equal(bits(values), bits(want_val)), fresh.name
        want_slots = dsa_topk.indexer_topk_paged(*fresh.inputs(), K, physical_slots=True, deterministic=True,
                                                 sorted=True)
        assert torch.equal(slots, want_slots), fresh.name


def test_paged_torch_compile_fullgraph():
    B, next_n, K = 4, 2, 1024
    pp = make_paged("model-like", B, next_n, 64, 64, boundary_lengths(B, next_n, True, K, 15), True, 15)
    torch._dynamo.reset()

    def decode(q, kv_cache, block_table, context_lens, w):
        idx, val = dsa_topk.indexer_topk_paged(q, kv_cache, block_table, context_lens, w, K, return_values=True,
                                               deterministic=True, check_ranges=False)
        slots = dsa_topk.indexer_topk_paged(q, kv_cache, block_table, context_lens, w, K, physical_slots=True,
                                            deterministic=True, check_ranges=False)
        merged, _ = dsa_topk.merge_topk(val[None], idx[None], K, deterministic=True)
        return idx + 1, slots + 1, merged  # torch ops around the custom ops

    got = torch.compile(decode, fullgraph=True)(*pp.inputs())
    want = decode(*pp.inputs())
    for g, w in zip(got, want):
        assert torch.equal(sort_rows(g), sort_rows(w))


def test_paged_torch_compile_out_variant():
    B, next_n, bs, K = 3, 2, 64, 2048
    pp = make_paged("ties", B, next_n, 64, bs, boundary_lengths(B, next_n, False, K, 16), False, 16)
    torch._dynamo.reset()

    def decode(q, kv_cache, weights, seq_lens, block_table, out):
        dsa_topk.vllm_indexer_topk_decode(q, kv_cache, weights, seq_lens, block_table, out, deterministic=True)
        return out.sum()

    out = torch.full((pp.rows, K), -7, dtype=torch.int32, device="cuda")
    kv_4d = pp.kv_cache.view(-1, bs, 1, SLOT_BYTES)  # DeepGEMM's view of vLLM's cache
    total = torch.compile(decode, fullgraph=True, backend="aot_eager")(pp.q, kv_4d, pp.w, pp.context_lens,
                                                                       pp.block_table, out)
    want = dsa_topk.indexer_topk_paged(*pp.inputs(), K, deterministic=True)
    assert torch.equal(sort_rows(out), sort_rows(want))
    assert int(total) == int(want.sum())


def test_paged_opcheck():
    """Schemas, fake implementations and the dispatcher registrations agree
    (test_runtime.py says why the FP8-input ops skip opcheck's schema test)."""
    pp = make_paged("model-like", 2, 2, 64, 64, [700, 3000], False, 17)
    out = torch.empty(pp.rows, 512, dtype=torch.int32, device="cuda")
    values = torch.empty(pp.rows, 512, device="cuda")
    kw = dict(deterministic=True, check_ranges=False)
    fp8_utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args, kwargs in [
        (torch.ops.dsa_topk.indexer_topk_paged.default, (*pp.inputs(), 512), dict(return_values=True, **kw)),
        (torch.ops.dsa_topk.indexer_topk_paged.default, (*pp.inputs(), 1024), dict(physical_slots=True, **kw)),
        (torch.ops.dsa_topk.indexer_topk_paged_out.default, (*pp.inputs(), out, values), kw),
    ]:
        torch.library.opcheck(op, args, kwargs, test_utils=fp8_utils)
    part_values, part_indices = make_parts(3, 8, 512, "normal", seed=18)
    torch.library.opcheck(torch.ops.dsa_topk.merge_topk.default, (part_values, part_indices, 512),
                          dict(deterministic=True, sorted=True))


# ----------------------------------------------------------------- errors --

EB, EN, EH, EBS, EK = 4, 2, 64, 16, 512


@pytest.fixture(scope="module")
def good():
    return make_paged("model-like", EB, EN, EH, EBS, [0, 600, 1500, 100], False, 90)


def replaced(t, index, value):
    t = t.clone()
    t[index] = value
    return t


def per_token(lens):
    """1-D context_lens as their [B, EN] per-token form."""
    return (lens[:, None] - EN + torch.arange(EN, device=lens.device) + 1).clamp(min=0).int()


def strided(cache):
    """The cache as a view into a wider buffer (not contiguous)."""
    wide = torch.zeros(cache.shape[0], cache.shape[1] + 16, dtype=torch.uint8, device=cache.device)
    wide[:, : cache.shape[1]] = cache
    return wide[:, : cache.shape[1]]


def fp8(x):
    return x.to(FP8)


# (case, inputs -> modified inputs dict, message pattern).
BAD_INPUTS = [
    ("q dtype", lambda a: {**a, "q": a["q"].float().half()}, r"q: must have dtype Float8_e4m3fn"),
    ("q on the host", lambda a: {**a, "q": a["q"].cpu()}, r"q: must be a CUDA tensor"),
    ("q rank", lambda a: {**a, "q": a["q"].reshape(EB * EN, EH, D)}, r"q: must have 4 dimensions"),
    ("num_heads", lambda a: {**a, "q": fp8(a["q"].float()[:, :, :16].contiguous()), "w": a["w"][:, :16].contiguous()},
     r"num_heads.*\[num_heads is q\.size\(2\)\]"),
    ("kv_cache dtype", lambda a: {**a, "kv_cache": a["kv_cache"].view(torch.int8)}, r"kv_cache: must have dtype Byte"),
    ("kv_cache on the host", lambda a: {**a, "kv_cache": a["kv_cache"].cpu()}, r"kv_cache: must be a CUDA tensor"),
    ("kv_cache rank", lambda a: {**a, "kv_cache": a["kv_cache"].view(-1)}, r"kv_cache: must have 2 or 3 dimensions"),
    ("kv_cache slot bytes", lambda a: {**a, "kv_cache": a["kv_cache"].view(-1, EBS, SLOT_BYTES)[..., :D].contiguous()},
     r"kv_cache: size\(2\) must be q\.size\(3\) \+ 4"),
    ("kv_cache block bytes", lambda a: {**a, "kv_cache": a["kv_cache"][:, :-4].contiguous()},
     r"kv_cache: size\(1\) must be block_size \* \(q\.size\(3\) \+ 4\)"),
    ("kv_cache not contiguous", lambda a: {**a, "kv_cache": strided(a["kv_cache"])}, r"kv_cache: must be contiguous"),
    ("block size", lambda a: {**a, "kv_cache": a["kv_cache"].view(-1, 8 * SLOT_BYTES)},
     r"block_size.*\[block_size is kv_cache\.size\(1\) / \(q\.size\(3\) \+ 4\)\]"),
    ("block_table dtype", lambda a: {**a, "block_table": a["block_table"].long()}, r"block_table: must have dtype Int"),
    ("block_table rows", lambda a: {**a, "block_table": a["block_table"][:-1]},
     r"block_table: size\(0\) must be q\.size\(0\)"),
    ("block_table columns strided", lambda a: {**a, "block_table": a["block_table"].t().contiguous().t()},
     r"block_table: each row must be contiguous"),
    ("block_table entry past the cache",
     lambda a: {**a, "block_table": replaced(a["block_table"], (2, 5), a["kv_cache"].shape[0])},
     r"block_table\[2, 5\]: must be in \[0, num_blocks\)"),
    ("block_table entry negative", lambda a: {**a, "block_table": replaced(a["block_table"], (1, 0), -1)},
     r"block_table\[1, 0\]: must be in \[0, num_blocks\)"),
    ("context_lens dtype", lambda a: {**a, "context_lens": a["context_lens"].long()},
     r"context_lens: must have dtype Int"),
    ("context_lens length", lambda a: {**a, "context_lens": a["context_lens"][:-1]},
     r"context_lens: size\(0\) must be q\.size\(0\)"),
    ("context_lens next_n", lambda a: {**a, "context_lens": a["context_lens"][:, None].repeat(1, EN + 1)},
     r"context_lens: size\(1\) must be q\.size\(1\)"),
    ("context_lens negative", lambda a: {**a, "context_lens": replaced(a["context_lens"], 3, -1)},
     r"context_lens\[3\]: must be >= 0"),
    ("context_lens negative per token",
     lambda a: {**a, "context_lens": replaced(per_token(a["context_lens"]), (1, 0), -5)},
     r"context_lens\[1, 0\]: must be >= 0"),
    ("context_lens past the table",
     lambda a: {**a, "context_lens": replaced(a["context_lens"], 1, a["block_table"].shape[1] * EBS + 1)},
     r"context_lens\[1\]: must be <= max_context\(\)"),
    ("w dtype", lambda a: {**a, "w": a["w"].bfloat16()}, r"w: must have dtype Float"),
    ("w rank", lambda a: {**a, "w": a["w"].view(-1)}, r"w: must have 2 or 3 dimensions"),
    ("w rows", lambda a: {**a, "w": a["w"][:-1]}, r"w: size\(0\) must be q\.size\(0\) \* q\.size\(1\)"),
    ("w heads", lambda a: {**a, "w": a["w"][:, :32].contiguous()}, r"w: size\(1\) must be q\.size\(2\)"),
]


def test_next_n_past_the_limit_is_named(good):
    """next_n = 10 (the outputs sized for it, so the library's rule is what fails)."""
    a = inputs_of(good)
    q = fp8(a["q"].float().repeat(1, 5, 1, 1))
    w = a["w"].view(EB, EN, EH).repeat(1, 5, 1)
    pattern = r"next_n: must be in \[1, 8\] \(got 10\) \[next_n is q\.size\(1\)\]"
    indices = torch.full((EB * EN * 5, EK), 777, dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_paged_out(q, a["kv_cache"], a["block_table"], a["context_lens"], w, indices)
    torch.cuda.synchronize()
    assert bool((indices == 777).all()), "a rejected call wrote its outputs"
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_paged(q, a["kv_cache"], a["block_table"], a["context_lens"], w, EK)


def inputs_of(pp):
    return dict(q=pp.q, kv_cache=pp.kv_cache, block_table=pp.block_table, context_lens=pp.context_lens, w=pp.w)


def args(a):
    return a["q"], a["kv_cache"], a["block_table"], a["context_lens"], a["w"]


@pytest.mark.parametrize("case,modify,pattern", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_and_leave_outputs_untouched(good, case, modify, pattern):
    a = modify(inputs_of(good))
    indices = torch.full((good.rows, EK), 777, dtype=torch.int32, device="cuda")
    values = torch.full((good.rows, EK), 3.5, device="cuda")
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_paged_out(*args(a), indices, values)
    torch.cuda.synchronize()
    assert bool((indices == 777).all()) and bool((values == 3.5).all()), "a rejected call wrote its outputs"
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_paged(*args(a), EK, physical_slots=True)


BAD_OUTPUTS = [
    ("indices dtype", torch.int64, (EB * EN, EK), None, r"indices: must have dtype Int"),
    ("indices rows", torch.int32, (EB * EN + 1, EK), None, r"indices: size\(0\) must be q\.size\(0\) \* q\.size\(1\)"),
    ("indices K", torch.int32, (EB * EN, 100), None, r"options\.k: must be one of 512, 1024, 2048.*indices\.size\(1\)"),
    ("values shape", torch.int32, (EB * EN, EK), (EB * EN, EK - 1), r"values: must have the shape of indices"),
]


@pytest.mark.parametrize("case,dtype,shape,values_shape,pattern", BAD_OUTPUTS, ids=[c[0] for c in BAD_OUTPUTS])
def test_bad_outputs_raise_and_stay_untouched(good, case, dtype, shape, values_shape, pattern):
    indices = torch.full(shape, 777, dtype=dtype, device="cuda")
    values = torch.full(values_shape, 3.5, device="cuda") if values_shape else None
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_paged_out(*good.inputs(), indices, values)
    torch.cuda.synchronize()
    assert bool((indices == 777).all())
    assert values is None or bool((values == 3.5).all())


def test_bad_topk_arguments(good):
    with pytest.raises(RuntimeError, match=r"options\.k: must be one of 512, 1024, 2048.*\[options\.k is topk\]"):
        dsa_topk.indexer_topk_paged(*good.inputs(), 100)
    with pytest.raises(RuntimeError, match=r"topk: must be one of"):
        dsa_topk.indexer_topk_paged(*good.inputs(), -1)


def test_paged_without_range_check_stays_in_bounds(good):
    """check_ranges=False with entries outside the cache and a length past
    the table: the call completes, its rows hold in-range positions, and the
    rows those inputs do not touch are the checked call's."""
    table = replaced(replaced(good.block_table, (2, 5), POISON), (1, 0), -7)
    lens = replaced(good.context_lens, 0, 10 ** 6)
    idx = dsa_topk.indexer_topk_paged(good.q, good.kv_cache, table, lens, good.w, EK, deterministic=True,
                                      check_ranges=False)
    torch.cuda.synchronize()
    capacity = good.block_table.shape[1] * EBS
    assert bool(((idx >= -1) & (idx < capacity)).all())
    want = dsa_topk.indexer_topk_paged(*good.inputs(), EK, deterministic=True)
    untouched = slice(3 * EN, 4 * EN)  # request 3
    assert torch.equal(idx[untouched], want[untouched])


def test_engine_decode_functions_check_too(good):
    buffer = torch.full((good.rows, EK), 777, dtype=torch.int32, device="cuda")
    bad_lens = replaced(good.context_lens, 3, -1)
    with pytest.raises(RuntimeError, match=r"context_lens\[3\]: must be >= 0"):
        dsa_topk.vllm_indexer_topk_decode(good.q, good.kv_cache, good.w, bad_lens, good.block_table, buffer,
                                          check_ranges=True)
    q_fp8 = good.q.view(good.rows, EH, D)
    with pytest.raises(RuntimeError, match=r"q_fp8: size\(0\) must be a multiple of page_table\.size\(0\)"):
        dsa_topk.sglang_indexer_topk_paged(q_fp8[:-1], good.kv_cache, good.w[:-1], good.context_lens,
                                           good.block_table, EK, out=buffer[:-1])
    with pytest.raises(RuntimeError, match=r"out: must have shape"):
        dsa_topk.sglang_indexer_topk_paged(q_fp8, good.kv_cache, good.w, good.context_lens, good.block_table, 2048,
                                           out=buffer)
    assert bool((buffer == 777).all())


# ------------------------------------------------------------------ merge --

def make_parts(P: int, R: int, part_k: int, kind: str, seed: int, empty: float = 0.2):
    """P parts' candidate lists for R rows, values fp32 / indices int32
    [P, R, part_k]. A row's indices are a random permutation of
    [0, 2 P part_k) dealt out to the parts (distinct across parts,
    interleaved), a fraction `empty` of the slots is -1 (holding +inf, which
    must be ignored), and the last row is empty in every part. Kinds:
    "normal", "ties" (values 0..3: ties across parts everywhere) and
    "special" (NaN, -inf and +inf among normal values)."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=g, device="cuda")

    n = P * part_k
    keys = rand(R, 2 * n).argsort(dim=1)[:, :n]
    indices = keys.reshape(R, P, part_k).transpose(0, 1).int()
    if kind == "ties":
        values = torch.randint(0, 4, (P, R, part_k), generator=g, device="cuda").float()
    else:
        values = torch.randn(P, R, part_k, generator=g, device="cuda")
    if kind == "special":
        pick = rand(P, R, part_k)
        values = values.masked_fill(pick < 0.05, float("nan"))
        values = values.masked_fill((pick >= 0.05) & (pick < 0.1), float("-inf"))
        values = values.masked_fill((pick >= 0.1) & (pick < 0.12), float("inf"))
    hole = rand(P, R, part_k) < empty
    hole[:, -1] = True
    return values.masked_fill(hole, float("inf")).contiguous(), indices.masked_fill(hole, -1).contiguous()


def ranked(values: torch.Tensor) -> torch.Tensor:
    """The value a score ranks by: NaN as -inf."""
    return values.masked_fill(torch.isnan(values), float("-inf"))


def flatten_parts(values, indices):
    """[P, R, part_k] -> each row's candidates [R, P * part_k]."""
    R = values.shape[1]
    return values.transpose(0, 1).reshape(R, -1), indices.transpose(0, 1).reshape(R, -1).long()


def merge_reference(values, indices, K: int):
    """The deterministic sorted merge, brute force: per row every non-empty
    candidate by descending rank, ascending index among equal ranks; the
    first min(K, count), then -1 / -inf."""
    v, i = flatten_parts(values, indices)
    empty = i < 0
    # Lexicographic (non-empty first, rank descending, index ascending):
    # stable sorts from the last key to the first.
    order = torch.argsort(i, dim=1, stable=True)
    for key, descending in ((ranked(v), True), (empty.int(), False)):
        order = order.gather(1, torch.argsort(key.gather(1, order), dim=1, descending=descending, stable=True))
    top_i, top_v = i.gather(1, order)[:, :K], v.gather(1, order)[:, :K]
    if top_i.shape[1] < K:
        pad = K - top_i.shape[1]
        top_i = torch.cat([top_i, top_i.new_full((top_i.shape[0], pad), -1)], dim=1)
        top_v = torch.cat([top_v, top_v.new_full((top_v.shape[0], pad), float("-inf"))], dim=1)
    slots = torch.arange(K, device=v.device) < (~empty).sum(dim=1, keepdim=True).clamp(max=K)
    return torch.where(slots, top_i, -1).int(), top_v.masked_fill(~slots, float("-inf"))


def check_merge_selection(values, indices, got_i, got_v, K: int):
    """Per row min(K, non-empty) distinct candidates of that row with their
    own values (bit for bit), then -1 / -inf."""
    v, i = flatten_parts(values, indices)
    universe = 2 * values.shape[0] * values.shape[2] + 1  # make_parts' indices, and a column for the empties
    keep = i >= 0
    column = torch.where(keep, i, universe - 1)
    own = torch.zeros(v.shape[0], universe, device=v.device).scatter_(1, column, v)
    present = torch.zeros(v.shape[0], universe, dtype=torch.int32, device=v.device).scatter_(1, column, keep.int())
    valid = got_i >= 0
    assert torch.equal(valid.sum(dim=1), keep.sum(dim=1).clamp(max=K)), "wrong number of selected entries"
    assert bool((got_i[~valid] == -1).all()) and bool((got_v[~valid] == float("-inf")).all()), "padding"
    g = got_i.long().clamp(min=0)
    assert bool(present.gather(1, g).bool()[valid].all()), "an index that is not a candidate of its row"
    assert torch.equal(bits(got_v)[valid], bits(own.gather(1, g))[valid]), "a value that is not its candidate's"
    ordered = torch.where(valid, g, -2 - torch.arange(K, device=g.device)).sort(dim=1).values
    assert bool((ordered[:, 1:] != ordered[:, :-1]).all()), "duplicate index in a row"


MERGE_CASES = ([(P, kind, (512, 2048)[P % 2], (512, 2048)[P % 2]) for P in range(1, 9)
                for kind in ("normal", "ties", "special")]
               + [(1, "normal", 512, 100), (3, "ties", 2048, 300), (4, "special", 1024, 1500), (2, "ties", 512, 2048)])


@pytest.mark.parametrize("P,kind,K,part_k", MERGE_CASES)
def test_merge_matches_brute_force(P, kind, K, part_k):
    values, indices = make_parts(P, 33, part_k, kind, seed=P * 10 + len(kind))
    want_i, want_v = merge_reference(values, indices, K)
    got_i, got_v = dsa_topk.merge_topk(values, indices, K, deterministic=True, sorted=True)
    assert got_i.shape == (33, K) and got_i.dtype == torch.int32 and got_v.dtype == torch.float32
    assert torch.equal(got_i, want_i)
    assert torch.equal(bits(got_v), bits(want_v))
    got_i, got_v = dsa_topk.merge_topk(values, indices, K, deterministic=True)
    assert torch.equal(sort_rows(got_i), sort_rows(want_i))
    check_merge_selection(values, indices, got_i, got_v, K)
    # Default ties: the same ranks, any choice among equal ones.
    got_i, got_v = dsa_topk.merge_topk(values, indices, K)
    check_merge_selection(values, indices, got_i, got_v, K)
    assert torch.equal(sort_rows(ranked(got_v)), sort_rows(ranked(want_v)))


def test_merge_edge_shapes():
    K = 512
    idx, val = dsa_topk.merge_topk(torch.empty(0, 5, 64, device="cuda"),
                                   torch.empty(0, 5, 64, dtype=torch.int32, device="cuda"), K)
    assert idx.shape == (5, K) and bool((idx == -1).all()) and bool((val == float("-inf")).all())
    idx, val = dsa_topk.merge_topk(torch.empty(3, 0, 64, device="cuda"),
                                   torch.empty(3, 0, 64, dtype=torch.int32, device="cuda"), K)
    assert idx.shape == (0, K) and val.shape == (0, K)


def test_merge_errors():
    values, indices = make_parts(2, 4, 512, "normal", seed=19)
    for bad, pattern in [
        (dict(values=values.double()), r"values: must have dtype Float"),
        (dict(values=values.cpu()), r"values: must be a CUDA tensor"),
        (dict(values=values[0]), r"values: must have 3 dimensions"),
        (dict(values=values.transpose(1, 2).contiguous().transpose(1, 2)), r"values: must be contiguous"),
        (dict(indices=indices.long()), r"indices: must have dtype Int"),
        (dict(indices=indices[:, :-1]), r"indices: must have the shape of values"),
        (dict(topk=100), r"options\.k: must be one of 512, 1024, 2048.*\[options\.k is topk\]"),
    ]:
        kw = dict(values=values, indices=indices, topk=512)
        kw.update(bad)
        with pytest.raises(RuntimeError, match=pattern):
            dsa_topk.merge_topk(kw["values"], kw["indices"], kw["topk"])


def test_merge_cuda_graph_replay():
    P, R, K = 4, 16, 2048
    values, indices = make_parts(P, R, K, "ties", seed=80)
    graph, (got_i, got_v) = capture(lambda: dsa_topk.merge_topk(values, indices, K, deterministic=True,
                                                                sorted=True))
    for seed in (81, 82):
        fresh_values, fresh_indices = make_parts(P, R, K, "special", seed=seed)
        values.copy_(fresh_values)
        indices.copy_(fresh_indices)
        graph.replay()
        torch.cuda.synchronize()
        want_i, want_v = merge_reference(fresh_values, fresh_indices, K)
        assert torch.equal(got_i, want_i) and torch.equal(bits(got_v), bits(want_v))


@pytest.mark.parametrize("dist,layout,K,slices", [("model-like", "causal", 2048, 2), ("ties", "varlen", 1024, 3),
                                                  ("dead-relu", "boundary", 512, 4),
                                                  ("small-integer", "varlen", 2048, 4)])
def test_merge_of_slices_equals_the_whole_range(dist, layout, K, slices):
    """Each row's [ks, ke) cut at random points into `slices` parts (some
    empty), the prefill op on every part (absolute indices, scores), merged:
    the prefill op's result on the whole range."""
    p = make_problem(dist, layout, T=48, N=12000, K=K, seed=20 + slices)
    g = torch.Generator(device="cuda").manual_seed(slices)
    length = (p.ke - p.ks).long()[:, None]
    cuts = (torch.rand(p.T, slices - 1, generator=g, device="cuda") * (length + 1)).long()
    cuts = torch.minimum(cuts, length).sort(dim=1).values
    bounds = torch.cat([torch.zeros_like(length), cuts, length], dim=1) + p.ks.long()[:, None]
    for deterministic in (True, False):
        parts = [dsa_topk.indexer_topk(p.q, p.k, p.k_scale, p.w, bounds[:, s].int().contiguous(),
                                       bounds[:, s + 1].int().contiguous(), K, deterministic=deterministic,
                                       return_values=True) for s in range(slices)]
        indices = torch.stack([i for i, _ in parts])
        values = torch.stack([v for _, v in parts])
        got_i, got_v = dsa_topk.merge_topk(values, indices, K, deterministic=deterministic, sorted=True)
        want_i, want_v = dsa_topk.indexer_topk(*p.inputs(), K, deterministic=deterministic, sorted=True,
                                               return_values=True)
        if deterministic:
            assert torch.equal(got_i, want_i)
            assert torch.equal(bits(got_v), bits(want_v))
        else:
            check_selection_shape(got_i, p.ks, p.ke, K, relative=False)
            assert torch.equal(got_v, want_v)  # sorted: the same scores in the same order (as numbers)


# --------------------------------------------------------- engine drop-ins --

def test_vllm_decode_stage_fills_its_rows_of_the_buffer():
    B, next_n, bs, K = 6, 2, 64, 2048
    pp = make_paged("model-like", B, next_n, 64, bs, boundary_lengths(B, next_n, False, K, 30), False, 30)
    want = dsa_topk.indexer_topk(*pp.gathered().inputs(), K, relative=True, deterministic=True)
    # vLLM's persistent [max_num_tokens, topk] buffer: decode writes its first rows.
    buffer = torch.full((3 * pp.rows, K), 4242, dtype=torch.int32, device="cuda")
    rows = buffer[: pp.rows]
    kv_4d = pp.kv_cache.view(-1, bs, 1, SLOT_BYTES)  # DeepGEMM's view of the cache
    ret = dsa_topk.vllm_indexer_topk_decode(pp.q, kv_4d, pp.w, pp.context_lens, pp.block_table, rows,
                                            deterministic=True)
    assert ret is rows
    assert torch.equal(sort_rows(rows), sort_rows(want))
    assert bool((buffer[pp.rows:] == 4242).all())
    # Native spec decode: seq_lens [B, next_n], and the cache as allocated.
    rows.fill_(4242)
    dsa_topk.vllm_indexer_topk_decode(pp.q, pp.kv_cache.view(-1, bs, SLOT_BYTES), pp.w,
                                      pp.row_lengths().view(B, next_n), pp.block_table, rows, deterministic=True)
    assert torch.equal(sort_rows(rows), sort_rows(want))


@pytest.mark.parametrize("next_n", [1, 2])
def test_sglang_paged_stage(next_n):
    B, H, K = 5, 64, 2048
    pp = make_paged("dead-relu", B, next_n, H, 64, boundary_lengths(B, next_n, False, K, 31), False, 31)
    positions = dsa_topk.indexer_topk(*pp.gathered().inputs(), K, relative=True, deterministic=True)
    q_fp8 = pp.q.view(pp.rows, H, D)  # SGLang's q: one row per token
    weights = pp.w[:, :, None]        # and its head gate [T, H, 1]
    # get_seqlens_int32() ([B]) and, with next_n > 1, get_seqlens_expanded() ([T]).
    for seqlens in ([pp.context_lens, pp.row_lengths()] if next_n > 1 else [pp.context_lens]):
        got = dsa_topk.sglang_indexer_topk_paged(q_fp8, pp.kv_cache, weights, seqlens, pp.block_table, K,
                                                 deterministic=True)
        assert got.shape == (pp.rows, K) and got.dtype == torch.int32
        assert torch.equal(sort_rows(got), sort_rows(pp.slots(positions)))
    out = torch.full((pp.rows + 3, K), -1, dtype=torch.int32, device="cuda")
    dsa_topk.sglang_indexer_topk_paged(q_fp8, pp.kv_cache, weights, pp.context_lens, pp.block_table, K,
                                       out=out[: pp.rows], physical_slots=False, deterministic=True)
    assert torch.equal(sort_rows(out[: pp.rows]), sort_rows(positions))
    assert bool((out[pp.rows:] == -1).all())
