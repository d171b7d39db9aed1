"""torch.ops.dsa_topk.indexer_scores timed as ../shared/anchors.md times it,
over its prefill grid, so that an A/B of two trees (scripts/ab-python.sh)
times the op exactly as the pinned DeepGEMM ratio did.

Inputs as the anchors describe them: q ~ N(0, 1) in FP8, k rows ~ N(0, 1)
quantised per row (scale amax / 448), w ~ N(0, 1) / 8, causal-suffix rows
(ks = 0, ke = N - T + t + 1). Each call is preceded by a 256 MB L2 flush and a
~100 us GPU sleep ("default" mode) and timed alone with CUDA events; the
median of --reps calls per row.

Timed per row: the op as this tree's default (``clean`` where the op has it:
-inf outside the ranges) and, where the op takes it, ``clean=False``.

Usage: python3 python/bench/bench_scores_op.py [--rows 4096x8192,...] [--reps 20] [--json out.json]
"""

import argparse
import json
import os
import sys

import torch

# The package comes from PYTHONPATH, never from beside this script: the A/B
# (scripts/ab-python.sh) runs this one script against two trees' packages.
if os.environ.get("PYTHONPATH") is None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dsa_topk  # noqa: E402,F401  (registers torch.ops.dsa_topk)

GRID = "4096x8192,4096x16384,4096x32768,4096x65536,4096x131072,512x131072,64x131072"
FP8 = torch.float8_e4m3fn


def quantized_keys(rows, g):
    """`rows` key rows ~ N(0, 1) quantised to FP8 per row (scale amax / 448),
    as the anchors' inputs: (k [rows, 128] FP8, fp32 scales [rows])."""
    k = torch.randn(rows, 128, device="cuda", generator=g)
    scale = (k.abs().amax(dim=1) / 448.0).clamp_min(1e-12)
    return (k / scale[:, None]).to(FP8), scale.float().contiguous()


def bench_args(description, default_rows, rows_help):
    """The anchors-timed benches' options: --rows, --reps (>= 1), --seed, --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", default=default_rows, help=rows_help)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    return parser, args


def make_inputs(T, N, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(T, 64, 128, device="cuda", generator=g).to(FP8)
    k, scale = quantized_keys(N, g)
    w = torch.randn(T, 64, device="cuda", generator=g) / 8
    ks = torch.zeros(T, dtype=torch.int32, device="cuda")
    ke = (N - T + 1 + torch.arange(T, device="cuda")).to(torch.int32)
    return q, k, scale, w, ks, ke


def takes_clean():
    schema = str(torch.ops.dsa_topk.indexer_scores.default._schema)
    return "clean" in schema


def median_ms(call, reps, flush):
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda._sleep(200_000)  # ~100 us at 1.7-2 GHz
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    _, args = bench_args(__doc__.splitlines()[0], GRID, "comma-separated TxN")

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    clean_arg = takes_clean()
    rows = []
    for spec in args.rows.split(","):
        T, N = (int(x) for x in spec.lower().split("x"))
        inputs = make_inputs(T, N, args.seed)
        op = torch.ops.dsa_topk.indexer_scores
        row = {"T": T, "N": N,
               "default_ms": median_ms(lambda: op(*inputs, check_ranges=False), args.reps, flush)}
        if clean_arg:
            row["no_clean_ms"] = median_ms(lambda: op(*inputs, clean=False, check_ranges=False), args.reps, flush)
        rows.append(row)
        extra = f", clean=False {row['no_clean_ms']:.3f} ms" if clean_arg else ""
        print(f"{T} x {N}: default {row['default_ms']:.3f} ms{extra}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    print(f"package: {os.path.dirname(dsa_topk.__file__)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "reps": args.reps, "package": dsa_topk.__file__,
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
