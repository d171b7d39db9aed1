#!/usr/bin/env python3
"""Summarises an ncu source-level report exported as CSV, here (no GPU needed).

On the device (one kernel launch, stall sampling per SASS instruction):
  ncu --clock-control none --section SourceCounters --section WarpStateStats \\
      -k regex:KERNEL --launch-skip 2 --launch-count 1 -o R <dsa-topk bench ...>
  ncu --import R.ncu-rep --page source --csv --print-source sass | gzip > $OUT/R-sass.csv.gz
Here:
  python3 scripts/ncu_source_summary.py R-sass.csv.gz [--top 30] [--per N]
      [--ranges 0,870,979,1330]
prints the stall reasons over the whole kernel, the instructions holding the
most samples (each with its top stall reasons), and with --ranges the samples
and instruction mix of each SASS index range [a, b). --per N divides the
executed-instruction counts by N (e.g. the tiles times warps a loop ran, to
read instructions per tile). Percentages are of all samples.
"""
import argparse
import collections
import csv
import gzip
import sys


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):
        if row and row[0] == "Address":
            return row, [r for r in rows[i + 1:] if len(r) == len(row)]
    sys.exit(f"{path}: no 'Address' header (export with --page source --csv --print-source sass)")


def as_int(text):
    try:
        return int(text or 0)
    except ValueError:
        return 0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30, help="instructions to list (default 30)")
    ap.add_argument("--per", type=float, default=0.0, help="divide instruction counts by this")
    ap.add_argument("--ranges", default="", help="comma-separated SASS indices a,b,c: ranges [a,b), [b,c)")
    args = ap.parse_args()

    header, data = read_rows(args.csv)
    i_src = header.index("Source")
    i_samples = header.index("Warp Stall Sampling (All Samples)")
    i_inst = header.index("Instructions Executed")
    stall_cols = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(as_int(r[i_samples]) for r in data) or 1
    total_inst = sum(as_int(r[i_inst]) for r in data)
    print(f"{len(data)} SASS instructions, {total} samples, {total_inst} warp instructions executed")

    reasons = collections.Counter()
    for r in data:
        for i in stall_cols:
            reasons[header[i][len("stall_"):]] += as_int(r[i])
    print("stall reasons (% of samples): " +
          ", ".join(f"{k} {100 * v / total:.1f}" for k, v in reasons.most_common() if v))

    def per(n):
        return f"{n / args.per:9.1f}/N" if args.per else f"{n:11d}"

    print(f"\nthe {args.top} instructions holding the most samples, in SASS order "
          "(index, % samples, executed, source, top reasons)")
    ranked = sorted(range(len(data)), key=lambda k: -as_int(data[k][i_samples]))[:args.top]
    for k in sorted(ranked):
        r = data[k]
        top = sorted(((as_int(r[i]), header[i][len("stall_"):]) for i in stall_cols), reverse=True)[:3]
        why = " ".join(f"{name}:{100 * v / total:.1f}" for v, name in top if v)
        print(f"{k:5d} {100 * as_int(r[i_samples]) / total:5.1f}% {per(as_int(r[i_inst]))}  "
              f"{r[i_src].strip()[:64]:64s} {why}")

    if args.ranges:
        cuts = [int(x) for x in args.ranges.split(",")]
        print("\nranges (samples, executed, top reasons, opcode mix)")
        for a, b in zip(cuts, cuts[1:]):
            chunk = data[a:b]
            samples = sum(as_int(r[i_samples]) for r in chunk)
            inst = sum(as_int(r[i_inst]) for r in chunk)
            why = collections.Counter()
            for r in chunk:
                for i in stall_cols:
                    why[header[i][len("stall_"):]] += as_int(r[i])
            mix = collections.Counter(opcode(r[i_src]) for r in chunk if as_int(r[i_inst]) > 0)
            print(f"[{a}, {b}): {100 * samples / total:5.1f}% {per(inst)}  " +
                  " ".join(f"{n}:{100 * v / total:.1f}" for n, v in why.most_common(4) if v))
            print("    " + " ".join(f"{n}x{c}" for n, c in mix.most_common(12)))


if __name__ == "__main__":
    main()
