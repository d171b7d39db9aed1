#!/usr/bin/env bash
# Several branches measured against one base in one device call: builds
# ab-base/ (dsa-topk only) and every ab-var/NAME/ (everything, tests too)
# side by side, then runs the plan's steps in order and writes
# $OUT/suite.md (each step's outcome, the GPU tests' summary lines, the A/B
# tables) and $OUT/suite-log.txt (every step's output). A step that fails
# is reported and the next one runs; no step starts past DEADLINE seconds.
#
# Prepare HERE:  bash scripts/ab-prepare.sh main
#                bash scripts/ab-prepare.sh --variant NAME BRANCH   (each)
#                write ab-var/plan.txt
# Device tool:   command "bash scripts/ab-suite.sh", carry [".deps", "ab-base", "ab-var"]
#
# Plan (PLAN, default ab-var/plan.txt; blank lines and '#' comments skipped),
# one step per line:
#   test NAME [GTEST_FILTER]           the variant's GPU tests (default all)
#   sanitize NAME TOOL GTEST_FILTER    compute-sanitizer --tool TOOL on them
#   ab NAME REPORT BENCH_ARGS...       scripts/ab-bench.sh, ab-base vs the variant
# Environment: ROUNDS (A/B rounds, default 2), DEADLINE (seconds, default 540).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/ab-out}"
PLAN="${PLAN:-ab-var/plan.txt}"
DEADLINE="${DEADLINE:-540}"
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
REPORT="$OUT/suite.md"
LOG="$OUT/suite-log.txt"
WORK="$(mktemp -d)"
: >"$REPORT"
: >"$LOG"
START=$SECONDS
say() { echo "$*" | tee -a "$REPORT"; }
left() { echo $((DEADLINE - (SECONDS - START))); }

for need in ab-base "$PLAN" .deps/googletest; do
  if [ ! -e "$need" ]; then
    echo "error: $need missing (prepare here: scripts/ab-prepare.sh, scripts/prepare-device.sh, the plan)" >&2
    exit 2
  fi
done
variants=()
for dir in ab-var/*/; do
  [ -d "$dir" ] && variants+=("$(basename "$dir")")
done
if [ "${#variants[@]}" = 0 ]; then
  echo "error: no ab-var/NAME/ (scripts/ab-prepare.sh --variant NAME REV)" >&2
  exit 2
fi

say "# A/B suite: A = ab-base ($(cat ab-base/.ab-rev 2>/dev/null || echo '?'))"
for v in "${variants[@]}"; do say "- $v = $(cat "ab-var/$v/.ab-rev" 2>/dev/null || echo '?')"; done
say ""

# Builds, all at once: each tree gets an equal share of the cores.
jobs=$(($(nproc) / (${#variants[@]} + 1) + 1))
build() {  # DIR TARGET...
  local dir="$1"; shift
  [ -e "$dir/.deps" ] || ln -s "$PWD/.deps" "$dir/.deps"
  (cd "$dir" && cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    cmake --build build-ab -j "$jobs" "$@") >"$WORK/build-$(basename "$dir").log" 2>&1
}
build ab-base --target dsa-topk &
pids=("$!")
for v in "${variants[@]}"; do
  build "ab-var/$v" &
  pids+=("$!")
done
declare -A built
i=0
for dir in ab-base "${variants[@]}"; do
  if wait "${pids[$i]}"; then built[$dir]=1; else
    say "build $dir: FAILED (log below in suite-log.txt)"
    grep -E 'error' "$WORK/build-$(basename "$dir").log" | head -20 | tee -a "$LOG"
  fi
  i=$((i + 1))
done
say "builds done at $((SECONDS - START)) s"
if [ -z "${built[ab-base]:-}" ]; then
  say "the base did not build: no A/B possible"
fi

step_no=0
while IFS= read -r line || [ -n "$line" ]; do
  line="${line%%#*}"
  read -r -a w <<<"$line"
  [ "${#w[@]}" = 0 ] && continue
  step_no=$((step_no + 1))
  kind="${w[0]}" name="${w[1]:-}"
  if [ "$(left)" -lt 20 ]; then
    say "step $step_no ($line): skipped, past the deadline"
    continue
  fi
  if [ -z "${built[$name]:-}" ]; then
    say "step $step_no ($line): skipped, variant '$name' not built"
    continue
  fi
  tests="ab-var/$name/build-ab/tests/dsa_gpu_tests"
  t0=$SECONDS
  echo "== step $step_no: $line" >>"$LOG"
  case "$kind" in
    test)
      timeout "$(left)" "$tests" --gtest_filter="${w[2]:-*}" >"$WORK/step.log" 2>&1
      rc=$?
      cat "$WORK/step.log" >>"$LOG"
      say "step $step_no (test $name ${w[2]:-*}): exit $rc in $((SECONDS - t0)) s"
      grep -E '^\[ *(PASSED|FAILED) *\]|^\[==========\] [0-9]+ tests' "$WORK/step.log" | tail -6 | tee -a "$REPORT"
      ;;
    sanitize)
      timeout "$(left)" compute-sanitizer --tool "${w[2]}" --error-exitcode 99 "$tests" \
        --gtest_filter="${w[3]:-*}" >"$WORK/step.log" 2>&1
      rc=$?
      cat "$WORK/step.log" >>"$LOG"
      say "step $step_no (sanitize $name ${w[2]} ${w[3]:-*}): exit $rc in $((SECONDS - t0)) s"
      grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[ *(PASSED|FAILED) *\]' "$WORK/step.log" | tail -4 | tee -a "$REPORT"
      ;;
    ab)
      OUT="$WORK/ab" NO_BUILD=1 B_DIR="ab-var/$name" AB_NAME="${w[2]}" ROUNDS="${ROUNDS:-2}" \
        timeout "$(left)" bash scripts/ab-bench.sh "${w[@]:3}" >>"$LOG" 2>&1
      rc=$?
      say "step $step_no (ab $name: ${w[*]:3}): exit $rc in $((SECONDS - t0)) s"
      grep '^|' "$WORK/ab/${w[2]}.md" 2>/dev/null | grep -v -- '---|' | tee -a "$REPORT"
      ;;
    *)
      say "step $step_no ($line): unknown step '$kind' (test, sanitize, ab)"
      ;;
  esac
done <"$PLAN"
[ -f "$WORK/ab/ab-log.txt" ] && cat "$WORK/ab/ab-log.txt" >>"$LOG"
say ""
say "suite done in $((SECONDS - START)) s"
