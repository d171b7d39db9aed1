#!/usr/bin/env bash
# Builds and runs every test. GPU tests report "Skipped" (with the reason in
# their output) on machines without an H100/H200.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
