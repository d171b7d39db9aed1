#!/usr/bin/env bash
# Side-by-side A/B of the PyTorch ops of two trees in one device call: A =
# ab-base/ (scripts/ab-prepare.sh REV), B = this tree (or B_DIR). Builds each
# tree's extension (python/dsa_topk/libdsa_topk_ops.so, with /usr/bin/g++ as
# python-check.sh does), then runs THIS tree's bench script (default
# python/bench/bench_scores_op.py) with A's and B's package alternately for
# ROUNDS rounds (default 3), each in a fresh process, and writes
# $OUT/ab-python.md: per row and field the ms of every round, the medians and
# B / A. The same script times both sides, so both run the same calls.
# Usage (device tool): command "bash scripts/ab-python.sh [bench options]",
#   carry ["ab-base"]; e.g. ROUNDS=3 bash scripts/ab-python.sh --reps 20
# Environment: BENCH (bench script, default python/bench/bench_scores_op.py),
# B_DIR (default .), PYTHON (default python3), NO_BUILD=1 (reuse the builds).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/ab-out}"
mkdir -p "$OUT"
ROUNDS="${ROUNDS:-3}"
B_DIR="${B_DIR:-.}"
BENCH="${BENCH:-python/bench/bench_scores_op.py}"
PYTHON="$(command -v "${PYTHON:-python3}")"
RUNS="$(mktemp -d)"
export PATH="/usr/local/cuda/bin:$PATH"
if [ ! -d ab-base ]; then
  echo "error: no ab-base/: run scripts/ab-prepare.sh REV here and carry ab-base" >&2
  exit 2
fi
if [ ! -f "$BENCH" ]; then
  echo "error: bench script $BENCH not found" >&2
  exit 2
fi

jobs="$(nproc)"
build() {  # build DIR JOBS LOG
  (cd "$1" && cmake -S . -B build-python -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDSA_BUILD_PYTHON=ON -DDSA_BUILD_TESTS=OFF -DDSA_BUILD_BENCH=OFF \
    -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
    -DPython3_EXECUTABLE="$PYTHON" >"$3" 2>&1 &&
    cmake --build build-python -j "$2" --target dsa_topk_ops >>"$3" 2>&1)
}
if [ -z "${NO_BUILD:-}" ]; then
  echo "building the extensions of A ($(cat ab-base/.ab-rev 2>/dev/null || echo '?')) and B ($B_DIR) ..."
  build ab-base $(((jobs + 1) / 2)) "$RUNS/build-a.log" &
  pid_a=$!
  build "$B_DIR" $(((jobs + 1) / 2)) "$RUNS/build-b.log"
  rc_b=$?
  wait "$pid_a"
  rc_a=$?
  if [ "$rc_a" != 0 ] || [ "$rc_b" != 0 ]; then
    cat "$RUNS/build-a.log" "$RUNS/build-b.log" >"$OUT/ab-python-build.log"
    echo "error: build failed (A: $rc_a, B: $rc_b); see $OUT/ab-python-build.log" >&2
    grep -E 'error' "$OUT/ab-python-build.log" | head -20 >&2
    exit 1
  fi
fi

for ((round = 1; round <= ROUNDS; ++round)); do
  for side in A B; do
    pkg="$B_DIR/python"
    [ "$side" = A ] && pkg=ab-base/python
    echo "round $round/$ROUNDS, $side: $BENCH $*" | tee -a "$OUT/ab-python-log.txt"
    if ! PYTHONPATH="$pkg" "$PYTHON" "$BENCH" "$@" --json "$RUNS/$side-$round.json" >>"$OUT/ab-python-log.txt" 2>&1; then
      echo "error: bench failed on $side, round $round:" >&2
      tail -5 "$OUT/ab-python-log.txt" >&2
      exit 1
    fi
  done
done

"$PYTHON" - "$RUNS" "$OUT" "$ROUNDS" "$(cat ab-base/.ab-rev 2>/dev/null || echo '?')" "$BENCH $*" <<'PY'
import json, statistics, sys
runs_dir, out, rounds, base_rev, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
runs = {s: [json.load(open(f"{runs_dir}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in "AB"}
def times(side):
    per = {}
    for run in runs[side]:
        for row in run["rows"]:
            for field, v in row.items():
                if field.endswith("_ms"):
                    per.setdefault((row["T"], row["N"], field), []).append(v)
    return per
a, b = times("A"), times("B")
lines = [f"# PyTorch op A/B: A = ab-base ({base_rev}), B = this tree", "",
         f"`{cmd}`, {rounds} rounds alternating A, B (a process each); ms per round, medians, B / A (< 1: B faster).", "",
         "| T | N | field | A ms | B ms | B / A | separated |", "|---|---|---|---|---|---|---|"]
for key in sorted(set(a) | set(b)):
    fa = " / ".join(f"{x:.3f}" for x in a.get(key, [])) or "-"
    fb = " / ".join(f"{x:.3f}" for x in b.get(key, [])) or "-"
    ratio = sep = "-"
    if key in a and key in b:
        ratio = f"{statistics.median(b[key]) / statistics.median(a[key]):.3f}"
        sep = "yes" if max(b[key]) < min(a[key]) or min(b[key]) > max(a[key]) else "no"
    lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {fa} | {fb} | {ratio} | {sep} |")
open(f"{out}/ab-python.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
