#!/usr/bin/env bash
# On the GPU machine: runs one command while nvidia-smi samples the SM clock
# and the board power every 20 ms, then prints one line: the command's wall
# time and the clock and power while it ran. Under the 700 W cap the clock
# follows the load, so two kernels' time ratio is their cycle ratio divided
# by their clock ratio; this gives the second factor (ncu gives the first).
# Usage: bash scripts/clock-probe.sh LABEL COMMAND [ARGS...]
# The command's own output passes through, the line comes last. Exit code:
# the command's.
set -uo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: scripts/clock-probe.sh LABEL COMMAND [ARGS...]" >&2
  exit 2
fi
label="$1"
shift
samples="$(mktemp)"
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 >"$samples" 2>/dev/null &
smi=$!
t0=$(date +%s.%N)
"$@"
rc=$?
t1=$(date +%s.%N)
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
# Busy samples: the board power above 150 W (an idle H200 draws ~80 W;
# the command's setup and exit leave the card idle).
awk -F', *' -v label="$label" -v t0="$t0" -v t1="$t1" '
  BEGIN { wall = t1 - t0 }
  $2 + 0 > 150 { n++; c[n] = $1 + 0; p[n] = $2 + 0 }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    if (n == 0) { printf "%s: wall %.2f s, no busy samples\n", label, wall; exit }
    cm = median(c, n); cmin = c[1]; cmax = c[n]; pm = median(p, n)
    printf "%s: wall %.2f s, %d busy samples, SM clock median %d MHz (%d-%d), power median %.0f W\n",
           label, wall, n, cm, cmin, cmax, pm
  }' "$samples"
rm -f "$samples"
exit "$rc"
