#!/usr/bin/env bash
# Configures and builds everything (library, CLI, CPU and GPU tests) in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
