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
python3 - "$label" "$t0" "$t1" "$samples" <<'PY'
import statistics, sys
label, t0, t1, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
busy = []
for line in open(path):
    fields = [f.strip() for f in line.split(",")]
    try:
        clock, power = float(fields[0]), float(fields[1])
    except (IndexError, ValueError):
        continue
    if power > 150:
        busy.append((clock, power))
wall = t1 - t0
if not busy:
    print(f"{label}: wall {wall:.2f} s, no busy samples")
else:
    clocks = [c for c, _ in busy]
    print(f"{label}: wall {wall:.2f} s, {len(busy)} busy samples, SM clock median {int(statistics.median(clocks))} MHz "
          f"({int(min(clocks))}-{int(max(clocks))}), power median {statistics.median(p for _, p in busy):.0f} W")
PY
rm -f "$samples"
exit "$rc"
