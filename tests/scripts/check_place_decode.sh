#!/usr/bin/env bash
# dsa_place_decode's argument handling (tools/place/decode_public.cu): what a
# machine with no GPU can check. Usage: check_place_decode.sh BINARY.
# Exit code: failures.
set -uo pipefail
bin="${1:?usage: check_place_decode.sh BINARY}"
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
expect() {  # expect RC PATTERN ARGS...: exit code RC, PATTERN in stdout + stderr
  local rc="$1" pattern="$2"
  shift 2
  local out
  out="$("$bin" "$@" 2>&1)"
  local got=$?
  [ "$got" = "$rc" ] || fail "'$*': exit $got, expected $rc ($out)"
  grep -qF -- "$pattern" <<<"$out" || fail "'$*': no '$pattern' in: $out"
}
expect 0 "[--op paged|topk] [--verify]" --help
expect 2 "--rows: '1x9x100' is not BxNEXT_NxL" --rows 1x9x100
expect 2 "--rows: '' is not BxNEXT_NxL" --rows 1x1x4096,
expect 2 "--rows: '0x1x4096' is not BxNEXT_NxL" --rows 0x1x4096
expect 2 "--reps: expected an integer in [1, 10000], got '0'" --reps 0
expect 2 "--seed: expected a non-negative integer, got '-1'" --seed -1
expect 2 "--op: expected paged or topk, got 'x'" --op x
expect 2 "--reps: needs a value" --reps
expect 2 "unknown argument '--bogus'" --bogus
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  expect 3 "no CUDA backend" --rows 1x1x4096 --reps 1
fi
[ "$failed" = 0 ] && echo "place_decode_cli: all checks passed"
exit "$failed"
