#!/usr/bin/env bash
# The device scripts run where they cannot be debugged (one GPU call, a few
# minutes): every one must parse, and clock-probe.sh's summary, which no run
# here can exercise, is checked against a stand-in nvidia-smi.
# Usage: tests/scripts/check_scripts.sh SCRIPTS_DIR. Exit code: failures.
set -uo pipefail
scripts="${1:?usage: check_scripts.sh SCRIPTS_DIR}"
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

for s in "$scripts"/*.sh; do
  bash -n "$s" 2>&1 || fail "$s does not parse"
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Five samples: one idle (80 W, left out), four busy.
cat >"$work/nvidia-smi" <<'SMI'
#!/bin/sh
printf '1980, 80.5\n1755, 480.0\n1500, 690.2\n1800, 500.0\n1700, 620.0\n'
SMI
chmod +x "$work/nvidia-smi"
out="$(PATH="$work:$PATH" bash "$scripts/clock-probe.sh" probe sh -c 'sleep 0.2; echo payload; exit 3')"
rc=$?
[ "$rc" = 3 ] || fail "clock-probe.sh: exit $rc, expected the command's 3"
grep -qx 'payload' <<<"$out" || fail "clock-probe.sh: the command's output did not pass through: $out"
want='probe: wall [0-9]+\.[0-9][0-9] s, 4 busy samples, SM clock median 1727 MHz \(1500-1800\), power median 560 W'
tail -1 <<<"$out" | grep -Eqx "$want" || fail "clock-probe.sh: summary '$(tail -1 <<<"$out")'"
bash "$scripts/clock-probe.sh" only-a-label >/dev/null 2>&1
[ $? = 2 ] || fail "clock-probe.sh without a command: expected exit 2"

bash "$scripts/profile-pack.sh" >/dev/null 2>&1
[ $? = 2 ] || fail "profile-pack.sh without a target: expected exit 2"

# place-decode.sh's table from stand-in binaries of both sides: the medians,
# B / A and public / ours from the anchors' row (1 x 128K: 0.027 / 0.020).
tree="$work/tree"
mkdir -p "$tree/scripts" "$tree/build-place/A" "$tree/build-place/B"
cp "$scripts/place-decode.sh" "$tree/scripts/"
bash "$tree/scripts/place-decode.sh" run >/dev/null 2>&1
[ $? = 2 ] || fail "place-decode.sh run without binaries: expected exit 2"
echo ad5198e >"$tree/build-place/A/REV"
echo "abc1234" >"$tree/build-place/B/REV"
for side in A:topk:0.0200 B:paged:0.0250; do
  IFS=: read -r name op ms <<<"$side"
  printf '#!/bin/sh\necho "# device NVIDIA H200, op %s, reps 20, seed 0"\necho "row 1x1x131072 %s %s"\n' \
    "$op" "$op" "$ms" >"$tree/build-place/$name/dsa_place_decode"
  chmod +x "$tree/build-place/$name/dsa_place_decode"
done
out="$(OUT="$work/place" bash "$tree/scripts/place-decode.sh" run --reps 20 2>/dev/null)"
rc=$?
[ "$rc" = 0 ] || fail "place-decode.sh run: exit $rc"
want='| 1x1x131072 | 0.0200 / 0.0200 / 0.0200 | 0.0250 / 0.0250 / 0.0250 | 1.250 | yes | 1.08x |'
grep -qxF "$want" <<<"$out" || fail "place-decode.sh: row '$(grep '^| 1x1' <<<"$out")'"
grep -q 'Not an H200' <<<"$out" && fail "place-decode.sh: an H200 run flagged as another card"
[ -s "$work/place/place-decode.md" ] || fail "place-decode.sh: no place-decode.md under OUT"
bash "$tree/scripts/place-decode.sh" >/dev/null 2>&1
[ $? = 2 ] || fail "place-decode.sh without a mode: expected exit 2"

# ab-prebuilt.sh's table from stand-in binaries (one gzipped, as prepare
# leaves them): the rounds, B / A of the medians, separation; a side whose
# result is not exact fails the run; a side with no binary is a usage error.
tree="$work/abtree"
mkdir -p "$tree/scripts" "$tree/build-ab/bin/A" "$tree/build-ab/bin/B" "$tree/build-ab/bin/W"
cp "$scripts/ab-prebuilt.sh" "$tree/scripts/"
for side in A:0.0200:exact B:0.0250:exact W:0.0100:wrong; do
  IFS=: read -r name ms result <<<"$side"
  printf '#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --json ] && j="$2"; shift; done
printf %s > "$j"
' \
    "'{\"rows\": [{\"ms\": $ms, \"result\": \"$result\"}]}'" >"$tree/build-ab/bin/$name/dsa-topk"
  chmod +x "$tree/build-ab/bin/$name/dsa-topk"
  echo "rev$name" >"$tree/build-ab/bin/$name/REV"
done
gzip "$tree/build-ab/bin/A/dsa-topk"
printf '# a comment\n\n--op topk --T 1 --N 32768\n' >"$tree/shapes.txt"
out="$(cd "$tree" && OUT="$work/ab" ROUNDS=3 bash scripts/ab-prebuilt.sh run shapes.txt A B 2>/dev/null)"
rc=$?
[ "$rc" = 0 ] || fail "ab-prebuilt.sh run: exit $rc"
want='| `--op topk --T 1 --N 32768` | 0.0200 / 0.0200 / 0.0200 | 0.0250 / 0.0250 / 0.0250 | 1.250 sep. |'
grep -qxF "$want" <<<"$out" || fail "ab-prebuilt.sh: row '$(grep '^| `' <<<"$out")'"
grep -q 'A = revA, B = revB' <<<"$out" || fail "ab-prebuilt.sh: the sides' revisions are not named"
[ -s "$work/ab/ab-prebuilt.md" ] || fail "ab-prebuilt.sh: no ab-prebuilt.md under OUT"
(cd "$tree" && OUT="$work/ab" ROUNDS=1 bash scripts/ab-prebuilt.sh run shapes.txt A W >/dev/null 2>&1)
[ $? = 1 ] || fail "ab-prebuilt.sh with a side that is not exact: expected exit 1"
(cd "$tree" && OUT="$work/ab" bash scripts/ab-prebuilt.sh run shapes.txt A Z >/dev/null 2>&1)
[ $? = 2 ] || fail "ab-prebuilt.sh with a side that has no binary: expected exit 2"
(cd "$tree" && OUT="$work/ab" ROUNDS=0 bash scripts/ab-prebuilt.sh run shapes.txt A B >/dev/null 2>&1)
[ $? = 2 ] || fail "ab-prebuilt.sh with ROUNDS=0: expected exit 2"
bash "$scripts/ab-prebuilt.sh" >/dev/null 2>&1
[ $? = 2 ] || fail "ab-prebuilt.sh without a mode: expected exit 2"

[ "$failed" = 0 ] && echo "scripts: all checks passed"
exit "$failed"
