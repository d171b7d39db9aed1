#!/usr/bin/env bash
# The PyTorch binding's GPU job (issue 6), run on the device machine from a
# fresh copy of the tree:
#   configures and builds the extension and the CLI with /usr/bin/g++ into
#   build-python/ (the documented command, README "Using the library from
#   PyTorch"), runs the pytest suite (python/tests), the examples, and the
#   PyTorch-vs-C++ timing (python/bench/bench_op.py), and writes
#   $OUT/python-summary.md, $OUT/pytest.xml, $OUT/bench-op.json and
#   $OUT/python.log.
# Usage (device tool): command "bash scripts/python-check.sh", carry [".deps"]
# (nlohmann/json for the CLI; prepare .deps here with scripts/prepare-device.sh).
# Environment: SKIP_BENCH=1 skips the timing; PYTEST_ARGS adds pytest options
# (e.g. "-k graph"); PYTHON picks the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/python-out}"
mkdir -p "$OUT"
LOG="$OUT/python.log"
SUMMARY="$OUT/python-summary.md"
: >"$LOG"
export PATH="/usr/local/cuda/bin:$PATH"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="$(command -v "${PYTHON:-python3}")"
JOBS="$(nproc)"

# shellcheck source=scripts/log-steps.sh
source scripts/log-steps.sh

{
  echo "# PyTorch binding check $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv 2>&1
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1
  /usr/bin/g++ --version | head -1
  echo '```'
} >"$SUMMARY"

# The extension must be built with the system g++ (shared/h200.md): the
# image's default compiler links libstdc++ statically into shared objects.
run_logged configure cmake -S . -B build-python -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDSA_BUILD_PYTHON=ON -DDSA_BUILD_TESTS=OFF \
  -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  -DPython3_EXECUTABLE="$PYTHON"
if [ "${RC[configure]}" = 0 ]; then
  run_logged build cmake --build build-python -j "$JOBS" --target dsa_topk_ops dsa-topk
fi
if [ "${RC[configure]}" != 0 ] || [ "${RC[build]}" != 0 ]; then
  { echo; echo "## Build FAILED"; echo '```'; grep -E -B2 -A8 'error|Error' "$LOG" | head -60; echo '```'; } >>"$SUMMARY"
  cat "$SUMMARY"
  exit 1
fi

# shellcheck disable=SC2086
run_logged pytest "$PYTHON" -m pytest python/tests -q -rs --durations=10 --junitxml="$OUT/pytest.xml" ${PYTEST_ARGS:-}
run_logged example_vllm "$PYTHON" python/examples/vllm_prefill.py
run_logged example_sglang "$PYTHON" python/examples/sglang_ragged.py
run_logged example_vllm_decode "$PYTHON" python/examples/vllm_decode.py
run_logged example_sglang_decode "$PYTHON" python/examples/sglang_decode.py
run_logged example_context_parallel "$PYTHON" python/examples/context_parallel.py
if [ -z "${SKIP_BENCH:-}" ]; then
  run_logged bench "$PYTHON" python/bench/bench_op.py --cli build-python/dsa-topk --json "$OUT/bench-op.json"
fi

{
  echo
  echo "## Steps"
  echo
  echo "| step | exit code |"
  echo "|---|---|"
  for name in "${STEPS[@]}"; do echo "| $name | ${RC[$name]} |"; done
  echo
  echo "## pytest"
  echo '```'
  section pytest | grep -vE '^\s*$' | tail -40
  echo '```'
  section_tails 25 example_vllm example_sglang example_vllm_decode example_sglang_decode example_context_parallel bench
} >>"$SUMMARY"
cat "$SUMMARY"
failed=0
for name in "${STEPS[@]}"; do [ "${RC[$name]}" != 0 ] && failed=1; done
exit $failed
