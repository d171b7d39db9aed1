"""Context parallelism for the prefill indexer: keys split over ranks, top-k merged.

Each rank holds a contiguous slice [start, end) of the N keys (and all T
query rows). Rank r runs dsa_topk.indexer_topk on its slice with each row's
[ks, ke) intersected with the slice and shifted into the slice's coordinates
(an empty range where they do not meet), adds `start` to its indices (-1
stays -1) and returns them with their scores; the ranks' lists, stacked
[P, T, K], go through dsa_topk.merge_topk. Every score of a key is computed
from that key and the row alone, and the merge keeps the top-K of the union
of the slices' top-K lists, so the result is the single indexer_topk call
over all N keys: bit-identical indices and values in deterministic mode, the
same sorted scores per row with the default ties.

Under torchrun (WORLD_SIZE > 1) each process is a rank on its own GPU with
its own slice, and the lists travel by all_gather_into_tensor over NCCL; rank
0 checks the merge against the single-GPU call. Without torchrun the ranks
run as slices one after another on one GPU. Either way it prints the time of
each rank's call and of the merge (CUDA events, median of --repeat runs) and
whether the result matches; the exit code is non-zero on a mismatch.

Run from the repository root after building (README):
    python3 python/examples/context_parallel.py                                 # 2 ranks in turn, one GPU
    torchrun --nproc-per-node 2 python/examples/context_parallel.py --world-size 2   # a GPU per rank
"""

import argparse
import os
import random
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402

H, D = 64, 128
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
LAYOUTS = ("causal", "ragged")
REQUESTS = 5    # sequences of a ragged batch
KEY_ALIGN = 4   # slice starts are multiples of 4 keys: k_scale must be 16-byte aligned (contract section 3)


# ------------------------------------------------------------------ inputs --

def make_ranges(layout: str, T: int, N: int, seed: int, device="cuda"):
    """Per-row [ks, ke), int32 [T] each. "causal": the last T tokens of one
    sequence of N. "ragged": a packed batch of REQUESTS sequences of random
    lengths filling [0, N), the rows shared out among them as each one's last
    tokens, causal inside it (a sequence shorter than its rows gives its
    first rows empty ranges). The same seed gives the same ranges on every
    rank."""
    if layout == "causal":
        if T > N:
            raise ValueError(f"causal rows need T <= N (T = {T}, N = {N})")
        ks, ke = [0] * T, [N - T + t + 1 for t in range(T)]
    elif layout == "ragged":
        cuts = [0] + sorted(random.Random(seed).sample(range(1, N), REQUESTS - 1)) + [N]
        ks, ke = [], []
        for r, (start, end) in enumerate(zip(cuts[:-1], cuts[1:])):
            rows = T // REQUESTS + (r < T % REQUESTS)
            ks += [start] * rows
            ke += [max(start, end - rows + j + 1) for j in range(rows)]
    else:
        raise ValueError(f"unknown layout {layout}")
    as_int = dict(dtype=torch.int32, device=device)
    return torch.tensor(ks, **as_int), torch.tensor(ke, **as_int)


def make_inputs(T: int, N: int, layout: str, seed: int, device="cuda"):
    """Model-like FP8 inputs as the engines quantize them: keys with one fp32
    scale per row, queries FP8 per (token, head) with the q scale, softmax
    scale and head scale folded into the fp32 weights. (q [T, H, D], k [N, D],
    k_scale [N], w [T, H], ks [T], ke [T]); seeded, so every rank builds the
    same ones."""
    g = torch.Generator(device=device).manual_seed(seed)
    k = torch.randn(N, D, generator=g, device=device)
    k_scale = k.abs().amax(dim=1) / FP8_MAX
    k_fp8 = (k / k_scale[:, None]).to(FP8)
    q = torch.randn(T, H, D, generator=g, device=device)
    q_scale = q.abs().amax(dim=2) / FP8_MAX  # [T, H]
    q_fp8 = (q / q_scale[..., None]).to(FP8)
    w = torch.randn(T, H, generator=g, device=device) * q_scale * D ** -0.5 * H ** -0.5
    return (q_fp8, k_fp8, k_scale.contiguous(), w.contiguous(), *make_ranges(layout, T, N, seed, device))


# -------------------------------------------------------------------- flow --

def slice_bounds(N: int, world_size: int):
    """The ranks' key slices [start, end): contiguous, together [0, N), as
    equal as starts on multiples of KEY_ALIGN allow."""
    starts = [N * r // world_size // KEY_ALIGN * KEY_ALIGN for r in range(world_size)]
    return list(zip(starts, starts[1:] + [N]))


def slice_ranges(ks: torch.Tensor, ke: torch.Tensor, start: int, end: int):
    """Each row's [ks, ke) intersected with the slice [start, end), in the
    slice's coordinates: int32 [T] each, within [0, end - start); empty where
    the row does not meet the slice (clamping keeps ks <= ke)."""
    return (ks.clamp(start, end) - start).int().contiguous(), (ke.clamp(start, end) - start).int().contiguous()


def rank_topk(q, k_slice, k_scale_slice, w, ks, ke, start: int, topk: int, deterministic: bool):
    """One rank's part: the top-k of each row over the keys it holds (k_slice
    [n, D], k_scale_slice [n]: keys [start, start + n) of the whole range) as
    (global indices int32, scores fp32), both [T, topk], -1 / -inf padded."""
    ks_r, ke_r = slice_ranges(ks, ke, start, start + k_slice.shape[0])
    indices, values = dsa_topk.indexer_topk(q, k_slice, k_scale_slice, w, ks_r, ke_r, topk, return_values=True,
                                            deterministic=deterministic)
    return torch.where(indices >= 0, indices + start, indices), values


def merge(indices: torch.Tensor, values: torch.Tensor, topk: int, deterministic: bool):
    """The ranks' lists [P, T, K] merged: (indices, values) [T, topk], sorted
    as the single call in whole_topk is, so the two compare slot by slot."""
    return dsa_topk.merge_topk(values, indices, topk, deterministic=deterministic, sorted=True)


def whole_topk(q, k, k_scale, w, ks, ke, topk: int, deterministic: bool):
    """The single call over all N keys that the ranks' merge must equal."""
    return dsa_topk.indexer_topk(q, k, k_scale, w, ks, ke, topk, return_values=True, deterministic=deterministic,
                                 sorted=True)


def timed(fn, repeat: int):
    """fn()'s result (its first run, which also warms the caching allocator)
    and the median time in ms of `repeat` more runs, each between two CUDA
    events on the current stream (NaN for repeat = 0)."""
    result = fn()
    if repeat == 0:
        return result, float("nan")
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(repeat)]
    for begin, end in events:
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return result, statistics.median(begin.elapsed_time(end) for begin, end in events)


def context_parallel_topk(q, k, k_scale, w, ks, ke, topk: int, world_size: int, deterministic: bool,
                          repeat: int = 0):
    """One GPU standing in for `world_size` ranks: each rank's part in turn on
    its slice of k (a view), then the merge. Returns ((indices, values)
    [T, topk], per-rank ms, merge ms), the times as in :func:`timed`."""
    parts, rank_ms = [], []
    for start, end in slice_bounds(k.shape[0], world_size):
        part, ms = timed(lambda: rank_topk(q, k[start:end], k_scale[start:end], w, ks, ke, start, topk,
                                           deterministic), repeat)
        parts.append(part)
        rank_ms.append(ms)
    indices = torch.stack([i for i, _ in parts])
    values = torch.stack([v for _, v in parts])
    merged, merge_ms = timed(lambda: merge(indices, values, topk, deterministic), repeat)
    return merged, rank_ms, merge_ms


def same_result(got, want, deterministic: bool) -> bool:
    """Deterministic: bit-identical indices and values. Default ties: the same
    scores per row (both sorted descending; which of equal scores is kept may
    differ, so the indices are not compared)."""
    (got_i, got_v), (want_i, want_v) = got, want
    if deterministic:
        return torch.equal(got_i, want_i) and torch.equal(got_v.view(torch.int32), want_v.view(torch.int32))
    return torch.equal(got_v, want_v)


def report(layout: str, deterministic: bool, bounds, rank_ms, merge_ms, single_ms, got, want,
           gather_ms=None) -> bool:
    """Prints one run's times and check; returns whether it matched."""
    T, K = got[0].shape
    same = same_result(got, want, deterministic)
    mode = "deterministic" if deterministic else "default ties"
    print(f"{layout} rows, {mode}: T = {T}, N = {bounds[-1][1]}, top-{K}, {len(bounds)} ranks")
    for r, ((start, end), ms) in enumerate(zip(bounds, rank_ms)):
        print(f"  rank {r}: keys [{start}, {end}): {ms:.3f} ms")
    if gather_ms is not None:
        print(f"  all_gather of indices and values: {gather_ms:.3f} ms")
    print(f"  merge_topk of {len(bounds)} lists: {merge_ms:.3f} ms (the single call over all keys: {single_ms:.3f} ms)")
    check = "bit-identical indices and values" if deterministic else "the same sorted scores per row"
    print(f"  matches the single call ({check}): {same}")
    return same


# -------------------------------------------------------------------- runs --

def runs(layouts):
    return [(layout, deterministic) for layout in layouts for deterministic in (True, False)]


def run_in_turn(args, world_size: int) -> int:
    print(f"{world_size} ranks as key slices, one after another on one GPU")
    ok = True
    for layout, deterministic in runs(args.layouts):
        inputs = make_inputs(args.tokens, args.keys, layout, args.seed)
        got, rank_ms, merge_ms = context_parallel_topk(*inputs, args.topk, world_size, deterministic, args.repeat)
        want, single_ms = timed(lambda: whole_topk(*inputs, args.topk, deterministic), args.repeat)
        ok &= report(layout, deterministic, slice_bounds(args.keys, world_size), rank_ms, merge_ms, single_ms, got,
                     want)
    return 0 if ok else 1


def run_distributed(args, world_size: int) -> int:
    # NVLink multicast stays off on the shared GPU hosts (the device notes):
    # set before NCCL starts, for this process and what it starts.
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl")
    rank = dist.get_rank()
    if rank == 0:
        print(f"{world_size} ranks, a GPU each, lists exchanged by NCCL all_gather_into_tensor")
    bounds = slice_bounds(args.keys, world_size)
    start, end = bounds[rank]
    ok = True
    for layout, deterministic in runs(args.layouts):
        q, k, k_scale, w, ks, ke = make_inputs(args.tokens, args.keys, layout, args.seed)
        k_held, k_scale_held = k[start:end].clone(), k_scale[start:end].clone()
        if rank != 0:  # rank 0 keeps the whole keys for the single-GPU check
            del k, k_scale
        (mine_i, mine_v), my_ms = timed(lambda: rank_topk(q, k_held, k_scale_held, w, ks, ke, start, args.topk,
                                                          deterministic), args.repeat)
        indices = mine_i.new_empty((world_size, *mine_i.shape))
        values = mine_v.new_empty((world_size, *mine_v.shape))

        def gather():
            dist.all_gather_into_tensor(indices, mine_i)
            dist.all_gather_into_tensor(values, mine_v)

        _, gather_ms = timed(gather, args.repeat)
        got, merge_ms = timed(lambda: merge(indices, values, args.topk, deterministic), args.repeat)
        rank_ms = torch.empty(world_size, device="cuda")
        dist.all_gather_into_tensor(rank_ms, torch.tensor([my_ms], device="cuda"))
        if rank == 0:
            want, single_ms = timed(lambda: whole_topk(q, k, k_scale, w, ks, ke, args.topk, deterministic),
                                    args.repeat)
            ok &= report(layout, deterministic, bounds, rank_ms.tolist(), merge_ms, single_ms, got, want, gather_ms)
    verdict = torch.tensor([int(ok)], device="cuda")
    dist.broadcast(verdict, src=0)  # every rank exits with rank 0's verdict
    dist.destroy_process_group()
    return 0 if verdict.item() else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1024, help="T, query rows (default 1024)")
    parser.add_argument("--keys", type=int, default=65536, help="N, keys of the whole context (default 65536)")
    parser.add_argument("--world-size", type=int, default=None,
                        help="ranks P (default: WORLD_SIZE under torchrun, else 2)")
    parser.add_argument("--topk", type=int, default=2048, choices=(512, 1024, 2048))
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per step, median (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    world_size = args.world_size if args.world_size is not None else (launched if launched > 1 else 2)
    if launched > 1 and world_size != launched:
        parser.error(f"--world-size {world_size} but torchrun started {launched} processes")
    if world_size < 1 or args.keys < world_size * KEY_ALIGN:
        parser.error(f"need 1 <= world size and {KEY_ALIGN} keys per rank (world size {world_size}, N = {args.keys})")
    return run_distributed(args, world_size) if launched > 1 else run_in_turn(args, world_size)


if __name__ == "__main__":
    sys.exit(main())
