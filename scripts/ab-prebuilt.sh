#!/usr/bin/env bash
# A/B of dsa-topk binaries built HERE, so the device call spends its time on
# the GPU, not on compiling (ab-bench.sh and ab-suite.sh build every side on
# the device machine). Each side is a process per shape and round, in turn.
# Two prebuilt sides over one bench invocation need no new script
# (ab-bench.sh with NO_BUILD=1, A_DIR and B_DIR holding build-ab/dsa-topk,
# .deps carried);
# this one takes any number of sides and a list of single shapes, and builds
# the sides from revisions here.
#
# Usage:
#   here:   bash scripts/ab-prebuilt.sh prepare NAME REV [--tests]
#             builds REV's dsa-topk (with --tests also dsa_gpu_tests) from
#             `git archive REV` in build-ab/work/NAME and puts it, gzipped,
#             with REV's hash, in build-ab/bin/NAME/. REV "." builds them
#             in this tree's build/ (configured already) and copies them.
#             Carry ["build-ab/bin"].
#   device: bash scripts/ab-prebuilt.sh run SHAPES_FILE NAME [NAME...]
#             SHAPES_FILE: one line of `dsa-topk bench` options a shape,
#             naming every axis so the bench prints one row ('#' comments
#             and blank lines skipped), e.g.
#               --op decode --B 1 --next-n 1 --L 32768
#             ROUNDS (default 3) rounds, each shape's sides in the order
#             given; REPS (default 20) timed calls a process; no process
#             starts past DEADLINE seconds (default 480). Writes
#             $OUT/ab-prebuilt.md (default ./ab-out): every round's ms, the
#             medians, each side over the first and whether their rounds are
#             separated; every bench's output goes to $OUT/ab-prebuilt-log.txt.
# Exit codes: 0 ok; 1 a build, a bench or a verification failed (the table
# still lists what ran); 2 bad usage or missing binaries.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
mode="${1:-}"
shift || true
usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
valid_name() { [[ "$1" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "error: NAME '$1': letters, digits, - and _ only" >&2; exit 2; }; }

case "$mode" in
prepare)
  name="${1:-}"
  rev="${2:-}"
  [ -n "$name" ] && [ -n "$rev" ] || usage
  valid_name "$name"
  tests=0
  [ "${3:-}" = --tests ] && tests=1
  export PATH="/usr/local/cuda/bin:$PATH"
  dest="build-ab/bin/$name"
  targets=(dsa-topk)
  [ "$tests" = 1 ] && targets+=(dsa_gpu_tests)
  if [ "$rev" = . ]; then
    build=build
    [ -d build ] || { echo "error: no build/: configure this tree first (bash scripts/build.sh)" >&2; exit 1; }
    ninja -C build "${targets[@]}" >/dev/null || { echo "error: build/ did not build ${targets[*]}" >&2; exit 1; }
    label="$(git rev-parse --short HEAD)$([ -z "$(git status --porcelain -- src include tools tests CMakeLists.txt)" ] || echo ' (with uncommitted changes)')"
  else
    sha="$(git rev-parse --verify --short "$rev^{commit}")" || { echo "error: REV '$rev' is not a commit" >&2; exit 2; }
    work="build-ab/work/$name"
    rm -rf "$work/src"
    mkdir -p "$work/src"
    git archive "$sha" | tar -x -C "$work/src"
    build="$work/build"
    echo "building $sha's ${targets[*]} in $build ..."
    if ! { cmake -S "$work/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSA_BUILD_BENCH=OFF \
             -DDSA_BUILD_TESTS=$([ "$tests" = 1 ] && echo ON || echo OFF) >"$work/build.log" 2>&1 &&
           cmake --build "$build" --target "${targets[@]}" >>"$work/build.log" 2>&1; }; then
      echo "error: $sha did not build; see $work/build.log" >&2
      exit 1
    fi
    label="$sha"
  fi
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$build/dsa-topk" "$dest/" || exit 1
  [ "$tests" = 1 ] && { cp "$build/tests/dsa_gpu_tests" "$dest/" || exit 1; }
  gzip -f "$dest"/dsa*
  echo "$label" >"$dest/REV"
  echo "$dest/ = $label ($(du -sh "$dest" | cut -f1)); carry [\"build-ab/bin\"]"
  ;;
run)
  shapes="${1:-}"
  shift || true
  [ -n "$shapes" ] && [ "$#" -ge 1 ] || usage
  [ -f "$shapes" ] || { echo "error: SHAPES_FILE '$shapes' not found" >&2; exit 2; }
  for name in "$@"; do
    valid_name "$name"
    dir="build-ab/bin/$name"
    [ -e "$dir/dsa-topk.gz" ] && gunzip -f "$dir"/*.gz
    [ -f "$dir/dsa-topk" ] || { echo "error: no $dir/dsa-topk: prepare it here and carry build-ab/bin" >&2; exit 2; }
    chmod +x "$dir"/dsa* 2>/dev/null
  done
  ROUNDS="${ROUNDS:-3}"
  REPS="${REPS:-20}"
  DEADLINE="${DEADLINE:-480}"
  for v in ROUNDS REPS DEADLINE; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "error: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
  done
  OUT="${OUT:-$PWD/ab-out}"
  mkdir -p "$OUT"
  log="$OUT/ab-prebuilt-log.txt"
  times="$(mktemp)"
  : >"$log"
  mapfile -t lines < <(grep -v '^[[:space:]]*\(#\|$\)' "$shapes")
  [ "${#lines[@]}" -ge 1 ] || { echo "error: SHAPES_FILE '$shapes' has no shape" >&2; exit 2; }
  failed=0
  start=$SECONDS
  for ((round = 1; round <= ROUNDS; ++round)); do
    for i in "${!lines[@]}"; do
      for name in "$@"; do
        if ((SECONDS - start >= DEADLINE)); then
          echo "deadline (${DEADLINE}s) reached in round $round" >&2
          break 3
        fi
        json="$(mktemp)"
        # shellcheck disable=SC2086  # a shape line is a list of options
        build-ab/bin/$name/dsa-topk bench --backend cuda ${lines[$i]} --reps "$REPS" --json "$json" >>"$log" 2>&1
        rc=$?
        ms="$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"]; print(r[0]["ms"] if len(r) == 1 and r[0].get("result") == "exact" else "x")' "$json" 2>/dev/null || echo x)"
        rm -f "$json"
        if [ "$rc" != 0 ] || [ "$ms" = x ]; then
          echo "error: $name, shape $((i + 1)) ('${lines[$i]}'), round $round: exit $rc, or not one exact row" \
            "(a shape names every axis of its grid, e.g. --next-n with --op decode; see $log)" >&2
          failed=1
          continue
        fi
        echo "$i $name $ms" >>"$times"
        echo "round $round/$ROUNDS, shape $((i + 1)), $name: $ms ms" >&2
      done
    done
  done
  python3 - "$times" "$OUT/ab-prebuilt.md" "$shapes" "$*" "${lines[@]}" <<'PY'
import statistics, sys
times, out, shapes_file, names = sys.argv[1:5]
names = names.split()
lines = sys.argv[5:]
per = {}
for row in open(times):
    i, name, ms = row.split()
    per.setdefault(int(i), {}).setdefault(name, []).append(float(ms))
revs = {}
for n in names:
    try:
        revs[n] = open(f"build-ab/bin/{n}/REV").read().strip()
    except OSError:
        revs[n] = "?"
first = names[0]
head = ["shape"] + [f"{n} ms" for n in names] + [f"{n} / {first}" for n in names[1:]]
md = [f"# A/B of prebuilt binaries ({shapes_file})", "",
      "Sides: " + ", ".join(f"{n} = {revs[n]}" for n in names) + ". ms per round; ratios of the medians, "
      "'sep.' where the two sides' rounds do not overlap.", "",
      "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
for i, line in enumerate(lines):
    got = per.get(i, {})
    cells = [f"`{line}`"]
    cells += [" / ".join(f"{x:.4f}" for x in got.get(n, [])) or "-" for n in names]
    for n in names[1:]:
        if got.get(n) and got.get(first):
            a, b = got[first], got[n]
            sep = " sep." if max(b) < min(a) or min(b) > max(a) else ""
            cells.append(f"{statistics.median(b) / statistics.median(a):.3f}{sep}")
        else:
            cells.append("-")
    md.append("| " + " | ".join(cells) + " |")
open(out, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
  rm -f "$times"
  exit "$failed"
  ;;
*)
  usage
  ;;
esac
