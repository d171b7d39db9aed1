# Step logging for the device scripts (gpu-check.sh, python-check.sh,
# pip-check.sh): source it after setting LOG, the log file.
#   step TEXT            prints "== TEXT" and appends it to the log;
#   run_logged NAME CMD  runs CMD with its output appended to the log, and
#                        records its exit code in RC[NAME], its seconds in
#                        SECS[NAME] and NAME in STEPS;
#   section NAME         prints what step NAME wrote to the log;
#   section_tails N NAME...  for each NAME that ran, a "## NAME" heading and
#                        the last N lines of its section, fenced.
step() { echo "== $*" | tee -a "$LOG"; }
declare -A RC SECS
STEPS=()
run_logged() {
  local name="$1"; shift
  STEPS+=("$name")
  step "$name: $*"
  local start=$SECONDS
  "$@" >>"$LOG" 2>&1
  RC[$name]=$?
  SECS[$name]=$((SECONDS - start))
  echo "   -> exit ${RC[$name]} in ${SECS[$name]} s" | tee -a "$LOG"
}
section() { sed -n "/^== $1:/,/^   -> exit/p" "$LOG" | grep -vE '^== |^   -> |^\[[0-9]+/[0-9]+\]'; }
section_tails() {
  local lines="$1" name
  shift
  for name in "$@"; do
    [ -n "${RC[$name]+x}" ] || continue
    printf '\n## %s\n```\n' "$name"
    section "$name" | tail -"$lines"
    echo '```'
  done
}
