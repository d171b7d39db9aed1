#!/usr/bin/env bash
# Side-by-side benchmark of two trees in one device call (the method the
# perf log's ratios need): A = ab-base/ (scripts/ab-prepare.sh), B = this
# tree. Builds dsa-topk for both at once, then runs
#   dsa-topk bench <your options> --json ...
# alternating A, B for ROUNDS rounds (default 2), and writes $OUT/ab.md:
# each row's time on every round, B / A of the medians, each side's spread
# ((max - min) / median) and whether the sides' rounds are separated. For the indexer op
# the math-only control is compared too. $OUT also gets ab-log.txt (every
# bench's output) and, if a build fails, its log: few files, as the device
# tool returns at most 8. Options are dsa-topk bench's
# (default backend cuda); e.g.
#   ROUNDS=3 bash scripts/ab-bench.sh --op indexer --T 4096 --N 8192 --dist model-like,ties --reps 10 --no-verify
# Environment: B_DIR (default .: another unpacked tree as the B side, so one
# call can compare several branches against one base), AB_NAME (default ab:
# the report is $OUT/$AB_NAME.md), NO_BUILD=1 (reuse both sides' build-ab
# from an earlier run in the same call).
# Cross form (A_ARGS set): A runs `dsa-topk bench $A_ARGS` instead of the
# same options, and the two sides' rows pair up by their order (one row
# each is the usual use): two routes of one build, or two ops. E.g. the
# decode op's fused selection against its unfused route, one tree built
# once (A_DIR=. and NO_BUILD=1 after a build into ./build-ab):
#   NO_BUILD=1 A_DIR=. A_ARGS="--op decode --B 1 --L 65536 --route unfused --reps 10 --no-verify" \
#     bash scripts/ab-bench.sh --op decode --B 1 --L 65536 --route fused-select --reps 10 --no-verify
# A_DIR (default ab-base) is the A tree.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/ab-out}"
mkdir -p "$OUT"
RUNS="$(mktemp -d)"
ROUNDS="${ROUNDS:-2}"
B_DIR="${B_DIR:-.}"
A_DIR="${A_DIR:-ab-base}"
A_ARGS="${A_ARGS:-}"
AB_NAME="${AB_NAME:-ab}"
export PATH="/usr/local/cuda/bin:$PATH"
if [ ! -d "$A_DIR" ]; then
  echo "error: no $A_DIR/: run scripts/ab-prepare.sh REV on the sending machine and carry it" >&2
  exit 2
fi
if [ ! -d .deps/googletest ] && [ ! -d "$A_DIR/.deps" ]; then
  echo "error: .deps missing: run scripts/prepare-device.sh here and carry .deps" >&2
  exit 2
fi
for side_dir in "$A_DIR" "$B_DIR"; do
  [ -e "$side_dir/.deps" ] || ln -s "$PWD/.deps" "$side_dir/.deps"
done
args=("$@")
case " $* " in *" --backend "*) ;; *) args=(--backend cuda "${args[@]}") ;; esac
a_args=("${args[@]}")
if [ -n "$A_ARGS" ]; then
  read -r -a a_args <<<"$A_ARGS"
  case " $A_ARGS " in *" --backend "*) ;; *) a_args=(--backend cuda "${a_args[@]}") ;; esac
fi

jobs="$(nproc)"
build() {  # build DIR JOBS LOG
  (cd "$1" && cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release >"$3" 2>&1 &&
    cmake --build build-ab -j "$2" --target dsa-topk >>"$3" 2>&1)
}
rc_a=0
rc_b=0
if [ -z "${NO_BUILD:-}" ]; then
  echo "building A ($(cat "$A_DIR/.ab-rev" 2>/dev/null || echo '?')) and B ($B_DIR) ..."
  build "$A_DIR" $(((jobs + 1) / 2)) "$RUNS/build-a.log" &
  pid_a=$!
  build "$B_DIR" $(((jobs + 1) / 2)) "$RUNS/build-b.log"
  rc_b=$?
  wait "$pid_a"
  rc_a=$?
fi
if [ "$rc_a" != 0 ] || [ "$rc_b" != 0 ]; then
  cat "$RUNS/build-a.log" "$RUNS/build-b.log" >"$OUT/ab-build.log"
  echo "error: build failed (A: $rc_a, B: $rc_b); see $OUT/ab-build.log" >&2
  grep -E 'error' "$OUT/ab-build.log" | head -20 >&2
  exit 1
fi

for ((round = 1; round <= ROUNDS; ++round)); do
  for side in A B; do
    bin="$B_DIR/build-ab/dsa-topk"
    side_args=("${args[@]}")
    if [ "$side" = A ]; then
      bin="$A_DIR/build-ab/dsa-topk"
      side_args=("${a_args[@]}")
    fi
    echo "round $round/$ROUNDS, $side: dsa-topk bench ${side_args[*]}" | tee -a "$OUT/ab-log.txt"
    if ! "$bin" bench "${side_args[@]}" --json "$RUNS/$side-$round.json" >>"$OUT/ab-log.txt" 2>&1; then
      echo "error: bench failed on $side, round $round:" >&2
      tail -5 "$OUT/ab-log.txt" >&2
      exit 1
    fi
  done
done

python3 - "$RUNS" "$OUT" "$ROUNDS" "$(cat "$A_DIR/.ab-rev" 2>/dev/null || echo '?')" "${args[*]}" "$AB_NAME" "$B_DIR" "$A_DIR" "$A_ARGS" <<'PY'
import json, statistics, sys
runs_dir, out, rounds, base_rev, cmd, name, b_dir, a_dir, a_cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9]
runs = {s: [json.load(open(f"{runs_dir}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in "AB"}
# A row's shape is the fields its op's rows have (the indexer, scores and
# top-k: layout, T, N, K, heads; decode: B, next_n, L, block_size; merge: P,
# R, part_k), so every op's rows pair up.
SHAPE = ("layout", "T", "N", "B", "next_n", "L", "block_size", "P", "R", "part_k", "K", "heads")
key = lambda row: (row["op"], row["dist"], " ".join(f"{f}={row[f]}" for f in SHAPE if f in row))
# Cross-op: rows pair by their order, named by both sides' keys.
cross = a_cmd != ""
def keyed(side, run):
    if not cross:
        return [(key(row), row) for row in run["rows"]]
    other = runs["B" if side == "A" else "A"][0]["rows"]
    pairs = []
    for i, row in enumerate(run["rows"]):
        if i < len(other):
            a, b = (row, other[i]) if side == "A" else (other[i], row)
            ka, kb = key(a), key(b)
            pairs.append(((f"{ka[0]} / {kb[0]}", f"{ka[1]} / {kb[1]}", f"{ka[2]} / {kb[2]}"), row))
    return pairs
def times(side, field):
    per_row = {}
    for run in runs[side]:
        for k, row in keyed(side, run):
            if row.get(field, 0) > 0:
                per_row.setdefault(k, []).append(row[field])
    return per_row
lines = [f"# A/B: A = {a_dir} ({base_rev}), B = {'this tree' if b_dir == '.' else b_dir}", "",
         f"`dsa-topk bench {cmd}`" + (f" (A: `dsa-topk bench {a_cmd}`, rows paired by order)" if cross else "") +
         f", {rounds} rounds alternating A, B; ms per round, medians, B / A (< 1: B faster).", ""]
for run in runs["A"][:1] + runs["B"][:1]:
    c = run.get("ceilings", {})
    if c.get("measured"):
        lines.append(f"- ceilings in one run: FP8 GEMM {c['fp8_tflops']:.0f} TFLOP/s, copy {c['copy_tb_s']:.2f} TB/s")
# "separated": every B round is below every A round (or above): the only
# verdict the rounds support on their own. Session 9's A/A runs (main
# against itself) spread 5-10 % on the scores op and 0.3 % on the indexer,
# so ratios inside the spread are noise.
lines += ["", "| op | dist | shape | field | A ms | B ms | B / A | spread A, B | separated |",
          "|---|---|---|---|---|---|---|---|---|"]
for field in ("ms", "math_only_ms"):
    a, b = times("A", field), times("B", field)
    for k in a:
        if k not in b:
            continue
        ma, mb = statistics.median(a[k]), statistics.median(b[k])
        fa = " / ".join(f"{x:.3f}" for x in a[k])
        fb = " / ".join(f"{x:.3f}" for x in b[k])
        spread = lambda v: 100.0 * (max(v) - min(v)) / statistics.median(v)
        separated = "yes" if max(b[k]) < min(a[k]) or min(b[k]) > max(a[k]) else "no"
        lines.append(f"| {' | '.join(str(x) for x in k)} | {field} | {fa} | {fb} | {mb / ma:.3f} | "
                     f"{spread(a[k]):.1f} %, {spread(b[k]):.1f} % | {separated} |")
open(f"{out}/{name}.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
