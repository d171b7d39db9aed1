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

[ "$failed" = 0 ] && echo "scripts: all checks passed"
exit "$failed"
