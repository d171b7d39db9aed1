#!/usr/bin/env bash
# The decode op placed against the public decode pipeline, the anchors' way
# (../shared/anchors.md, decode table), from two C++ binaries of one source
# (tools/place/decode_public.cu) instead of two PyTorch builds on the GPU
# machine:
#   A = the pinned revision's topk over each row's logits (its own
#       indexer_scores), the topk the anchors timed beside DeepGEMM + vLLM's
#       pick; B = this tree's indexer_topk_paged on the same rows.
# Per row, public / ours = (anchors' pipeline / anchors' topk) / (B / A).
#
# Usage:
#   here:   bash scripts/place-decode.sh prepare [REV]   (default ad5198e)
#           builds REV's library and A, this tree's B (build/, ninja) into
#           build-place/; then carry ["build-place"]
#   device: bash scripts/place-decode.sh run [harness options]
#           ROUNDS (default 3) alternating A, B, a process each; writes
#           $OUT/place-decode.md (default ./place-out) and prints it.
#           Options go to both sides, e.g. --reps 20 --rows 1x1x131072,...
# Exit codes: 0 ok, 1 a build or run failed, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
mode="${1:-}"
shift || true

# The anchors' decode table (../shared/anchors.md, H200, default mode):
# B x next_n x L, the best public pipeline's ms, this repository's topk (at
# ad5198e) on DeepGEMM's logits, ms.
ANCHORS="1x1x32768 0.020 0.018
1x1x131072 0.027 0.020
1x2x131072 0.028 0.021
4x1x1048576 0.193 0.028
32x1x32768 0.068 0.017
32x1x131072 0.184 0.024
32x2x131072 0.219 0.028
64x1x65536 0.189 0.021
128x1x32768 0.169 0.020
128x1x131072 0.625 0.036
128x2x131072 0.685 0.054"

case "$mode" in
prepare)
  rev="${1:-ad5198e}"
  export PATH="/usr/local/cuda/bin:$PATH"
  sha="$(git rev-parse --verify --short "$rev^{commit}")" || { echo "error: REV '$rev' is not a commit" >&2; exit 2; }
  rm -rf build-place/base-src build-place/A build-place/B
  mkdir -p build-place/base-src build-place/A build-place/B
  git archive "$sha" | tar -x -C build-place/base-src
  echo "building $sha's library (build-place/base-lib) ..."
  if ! { cmake -S build-place/base-src -B build-place/base-lib -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DDSA_BUILD_TESTS=OFF -DDSA_BUILD_BENCH=OFF >build-place/base-lib.log 2>&1 &&
         cmake --build build-place/base-lib --target dsa_topk >>build-place/base-lib.log 2>&1; }; then
    echo "error: $sha's library did not build; see build-place/base-lib.log" >&2
    exit 1
  fi
  if ! nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -DDSA_PLACE_PAGED=0 \
       -I build-place/base-src/include tools/place/decode_public.cu build-place/base-lib/libdsa_topk.a \
       -o build-place/A/dsa_place_decode -lpthread -ldl -lrt; then
    echo "error: the harness did not build against $sha" >&2
    exit 1
  fi
  [ -d build ] || { echo "error: no build/: configure this tree first (bash scripts/build.sh)" >&2; exit 1; }
  ninja -C build dsa_place_decode >/dev/null || { echo "error: build/dsa_place_decode did not build" >&2; exit 1; }
  cp build/dsa_place_decode build-place/B/
  echo "$sha" >build-place/A/REV
  { git rev-parse --short HEAD; [ -z "$(git status --porcelain -- src include tools CMakeLists.txt)" ] || echo "(with uncommitted changes)"; } \
    | tr '\n' ' ' >build-place/B/REV
  rm -rf build-place/base-src build-place/base-lib build-place/base-lib.log
  echo "build-place/: A = $sha's topk, B = this tree ($(cat build-place/B/REV)); carry [\"build-place\"]"
  ;;
run)
  for side in A B; do
    [ -x build-place/$side/dsa_place_decode ] ||
      { echo "error: no build-place/$side/dsa_place_decode: run 'bash scripts/place-decode.sh prepare' here and carry build-place" >&2; exit 2; }
  done
  OUT="${OUT:-$PWD/place-out}"
  mkdir -p "$OUT"
  ROUNDS="${ROUNDS:-3}"
  case "$ROUNDS" in '' | *[!0-9]*) echo "error: ROUNDS must be a positive integer, got '$ROUNDS'" >&2; exit 2 ;; esac
  [ "$ROUNDS" -ge 1 ] || { echo "error: ROUNDS must be at least 1" >&2; exit 2; }
  runs="$(mktemp -d)"
  for ((round = 1; round <= ROUNDS; ++round)); do
    for side in A B; do
      echo "round $round/$ROUNDS, $side" >&2
      if ! build-place/$side/dsa_place_decode "$@" >"$runs/$side-$round.txt" 2>"$runs/$side-$round.err"; then
        echo "error: side $side, round $round failed:" >&2
        tail -5 "$runs/$side-$round.err" >&2
        exit 1
      fi
    done
  done
  python3 - "$runs" "$OUT" "$ROUNDS" "$(cat build-place/A/REV)" "$(cat build-place/B/REV)" "$ANCHORS" "$*" <<'PY'
import statistics, sys
runs, out, rounds, rev_a, rev_b, anchors, args = sys.argv[1:8]
rounds = int(rounds)
anchor = {}
for line in anchors.splitlines():
    row, pipeline, topk = line.split()
    anchor[row] = (float(pipeline), float(topk))
def read(side):
    per, device = {}, "?"
    for r in range(1, rounds + 1):
        for line in open(f"{runs}/{side}-{r}.txt"):
            if line.startswith("# device"):
                device = line.split(",")[0][len("# device "):]
            elif line.startswith("row "):
                _, row, _, ms = line.split()
                per.setdefault(row, []).append(float(ms))
    return per, device
a, dev_a = read("A")
b, dev_b = read("B")
lines = [f"# Decode placement: A = {rev_a}'s topk over the logits, B = indexer_topk_paged ({rev_b})", "",
         f"Device: {dev_b}; `scripts/place-decode.sh run {args}`, {rounds} rounds alternating A, B "
         "(a process each); ms per round, medians. public / ours = (anchors' pipeline / anchors' topk) / (B / A).", ""]
if "H200" not in dev_b:
    lines += ["**Not an H200**: the anchors' ratios are H200 figures, so public / ours mixes cards here "
              "(a bandwidth-bound B / A is higher on an H100, so its public / ours is low).", ""]
lines += ["| B x next_n x L | A ms | B ms | B / A | separated | public / ours |", "|---|---|---|---|---|---|"]
for row in sorted(set(a) | set(b), key=lambda r: tuple(int(x) for x in r.split("x"))):
    fa = " / ".join(f"{x:.4f}" for x in a.get(row, [])) or "-"
    fb = " / ".join(f"{x:.4f}" for x in b.get(row, [])) or "-"
    ratio = sep = place = "-"
    if row in a and row in b:
        r = statistics.median(b[row]) / statistics.median(a[row])
        ratio = f"{r:.3f}"
        sep = "yes" if max(b[row]) < min(a[row]) or min(b[row]) > max(a[row]) else "no"
        if row in anchor:
            place = f"{anchor[row][0] / anchor[row][1] / r:.2f}x"
    lines.append(f"| {row} | {fa} | {fb} | {ratio} | {sep} | {place} |")
open(f"{out}/place-decode.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
  ;;
*)
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
