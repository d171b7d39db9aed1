# Step logging for the device scripts (gpu-check.sh, python-check.sh): source
# it after setting LOG, the log file.
#   step TEXT            prints "== TEXT" and appends it to the log;
#   run_logged NAME CMD  runs CMD with its output appended to the log, and
#                        records its exit code in RC[NAME] and NAME in STEPS.
step() { echo "== $*" | tee -a "$LOG"; }
declare -A RC
STEPS=()
run_logged() {
  local name="$1"; shift
  STEPS+=("$name")
  step "$name: $*"
  local start=$SECONDS
  "$@" >>"$LOG" 2>&1
  RC[$name]=$?
  echo "   -> exit ${RC[$name]} in $((SECONDS - start)) s" | tee -a "$LOG"
}
