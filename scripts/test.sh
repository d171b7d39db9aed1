#!/usr/bin/env bash
# Builds and runs every test. GPU tests report "Skipped" on machines without
# an H100/H200; the reason they give is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
rc=0
ctest --test-dir build --output-on-failure -j"$(nproc)" --output-log build/ctest.log || rc=$?
if grep -q "gpu_tests .*Skipped" build/ctest.log; then
  build/tests/dsa_gpu_tests || true  # prints why the GPU tests were skipped
fi
exit $rc
