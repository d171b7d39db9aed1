#!/usr/bin/env bash
# The one GPU job, run on the device machine from a fresh copy of the tree:
#   builds with ninja (ptxas register/spill report on), runs every gpu test,
#   compute-sanitizer (memcheck, racecheck, synccheck) on the gpu tests,
#   the cpu tests, the benchmark grid with in-run ceilings for every operator
#   in BENCH_OPS (with CUB and torch.topk baselines beside the top-k), and
#   writes $OUT/summary.md, $OUT/bench-<op>.json, $OUT/gpu-tests.json and
#   $OUT/full.log.
# Usage (device tool): command "bash scripts/gpu-check.sh", carry [".deps"]
# (prepare .deps here first with scripts/prepare-device.sh).
# Environment: GRID=h200|small (default h200), SKIP_SANITIZER=1,
# SANITIZER_FILTER (gtest filter for the sanitizer runs), BENCH_OPS (default
# "indexer scores topk"), BENCH_ARGS (extra bench options), SKIP_PYTHON=1
# (no PyTorch package build and pytest), PYTHON_BENCH=1 (also time the op
# through PyTorch against the C++ call), SKIP_RESTED=1 (no second scoring
# grid with the GPU rested before each call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
LOG="$OUT/full.log"
SUMMARY="$OUT/summary.md"
: >"$LOG"
export PATH="/usr/local/cuda/bin:$PATH"
JOBS="$(nproc)"

# shellcheck source=scripts/log-steps.sh
source scripts/log-steps.sh

{
  echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)') (git metadata may be stale in a device copy)"
  echo "tree: $(bash scripts/tree-hash.sh 2>/dev/null || echo unknown) (scripts/tree-hash.sh on the machine that sent it must print the same)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  nvcc --version | tail -1
  echo '```'
} >"$SUMMARY"

if [ ! -d .deps/googletest ]; then
  echo "error: .deps missing: run scripts/prepare-device.sh here and carry .deps" | tee -a "$SUMMARY"
  exit 1
fi

run_logged configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSA_PTXAS_VERBOSE=ON
run_logged build cmake --build build-gpu -j "$JOBS"
if [ "${RC[build]}" != 0 ]; then
  { echo; echo "## Build FAILED"; echo '```'; grep -E 'error|Error' "$LOG" | head -40; echo '```'; } >>"$SUMMARY"
  exit 1
fi

run_logged gpu_tests build-gpu/tests/dsa_gpu_tests --gtest_output="json:$OUT/gpu-tests.json"
if [ -z "${SKIP_SANITIZER:-}" ]; then
  for tool in memcheck racecheck synccheck; do
    run_logged "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      build-gpu/tests/dsa_gpu_tests --gtest_filter="${SANITIZER_FILTER:-*}"
  done
fi
run_logged cpu_tests ctest --test-dir build-gpu -L cpu -j "$JOBS" --output-on-failure
# The PyTorch package: its own build (build-python), pytest, the examples;
# the op-vs-C++ timing only when asked (PYTHON_BENCH=1), it runs a grid.
if [ -z "${SKIP_PYTHON:-}" ]; then
  if [ -n "${PYTHON_BENCH:-}" ]; then
    run_logged python env OUT="$OUT/python" bash scripts/python-check.sh
  else
    run_logged python env OUT="$OUT/python" SKIP_BENCH=1 bash scripts/python-check.sh
  fi
fi
BENCH_STEPS=()
for op in ${BENCH_OPS:-indexer scores topk}; do
  extra=()
  [ "$op" = topk ] && extra=(--baselines)
  run_logged "bench_$op" build-gpu/dsa-topk bench --backend cuda --op "$op" --grid "${GRID:-h200}" \
    --json "$OUT/bench-$op.json" "${extra[@]}" ${BENCH_ARGS:-}
  BENCH_STEPS+=("bench_$op")
done
# The scoring kernel again with the GPU rested 50 ms before each call: the
# clock a rested card runs it at, where back-to-back calls drift down under
# the 700 W cap with the row's length (tools/dsa-topk/power_state.h).
if [[ " ${BENCH_OPS:-indexer scores topk} " == *" scores "* ]] && [ -z "${SKIP_RESTED:-}" ]; then
  run_logged bench_scores_rested build-gpu/dsa-topk bench --backend cuda --op scores --grid "${GRID:-h200}" \
    --rest-ms 50 --reps 10 --json "$OUT/bench-scores-rested.json" ${BENCH_ARGS:-}
  BENCH_STEPS+=(bench_scores_rested)
fi
if [[ " ${BENCH_OPS:-indexer scores topk} " == *" topk "* ]]; then
  run_logged torch_topk python3 scripts/bench_torch_topk.py
  BENCH_STEPS+=(torch_topk)
fi

{
  echo
  echo "## Steps"
  echo
  echo "| step | exit code |"
  echo "|---|---|"
  for name in configure build gpu_tests sanitizer_memcheck sanitizer_racecheck sanitizer_synccheck cpu_tests python "${BENCH_STEPS[@]}"; do
    [ -n "${RC[$name]+x}" ] && echo "| $name | ${RC[$name]} |"
  done
  echo
  echo "## Kernel resources (ptxas)"
  echo '```'
  grep -E "Compiling entry|Used [0-9]+ registers|spill" "$LOG" | sed 's/^ptxas info *: //' | head -60
  echo '```'
  echo
  echo "## GPU tests"
  echo '```'
  grep -E '^\[ *(PASSED|FAILED|SKIPPED) *\]|^\[==========\]|SKIPPED:' "$LOG" | head -40
  echo '```'
  echo
  echo "## Sanitizers"
  echo '```'
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|== .*errors' "$LOG" | head -20
  echo '```'
  echo
  echo "## CPU tests"
  echo '```'
  grep -E 'tests passed|tests failed|Failed|Skipped' "$LOG" | tail -5
  echo '```'
  echo
  echo "## Benchmarks"
  for step in "${BENCH_STEPS[@]}"; do
    echo
    echo "### $step"
    echo '```'
    sed -n "/^== $step:/,/^   -> exit/p" "$LOG" | grep -vE '^\[[0-9]+/[0-9]+\]|^measuring|^== |^   -> ' | head -40
    echo '```'
  done
} >>"$SUMMARY"
cat "$SUMMARY"
failed=0
for name in "${!RC[@]}"; do [ "${RC[$name]}" != 0 ] && failed=1; done
exit $failed
