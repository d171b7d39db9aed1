"""In-run baseline for the standalone top-k (issue 3): torch.topk on the
device, the way a user without this library selects from a score matrix.

torch.topk cannot take per-row ranges, so it runs on full rows [T, N] of
normal scores: for causal-suffix rows that is up to 2x the valid pairs, which
is what a user has to do. Median of 20 timed calls (CUDA events) after a
warm-up, L2 flushed before each (a read of four times its size, as
`dsa-topk bench` does); prints a markdown table.
Usage: python3 scripts/bench_torch_topk.py [--k 2048]
"""
import argparse

import torch

GRID = [(4096, 8192), (4096, 16384), (4096, 32768), (4096, 65536), (4096, 131072), (512, 131072), (64, 131072)]


def median_ms(fn, flush, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.sum()  # reads only: clean lines, no write-backs in the timed call
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=2048)
    args = parser.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.ones(4 * l2_bytes // 4, device="cuda", dtype=torch.int32)
    print("| T | N | torch.topk ms (full rows) | torch.topk sorted=False ms |")
    print("|---|---|---|---|")
    for T, N in GRID:
        scores = torch.randn(T, N, device="cuda", dtype=torch.float32)
        sorted_ms = median_ms(lambda: torch.topk(scores, args.k, dim=1), flush)
        unsorted_ms = median_ms(lambda: torch.topk(scores, args.k, dim=1, sorted=False), flush)
        print(f"| {T} | {N} | {sorted_ms:.3f} | {unsorted_ms:.3f} |")
        del scores
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
