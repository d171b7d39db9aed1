#!/usr/bin/env bash
# Sets up, builds and runs the default job: an exactness check of every input
# distribution on the best available backend, with a results table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build/dsa-topk "$@"
