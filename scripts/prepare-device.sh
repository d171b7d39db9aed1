#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before a device call: the GPU machine has
# no GoogleTest, nlohmann/json, CLI11 or fmt and cannot download them, so their
# Debian sources/headers travel in the git-ignored folder .deps (carry it);
# fmt is used header-only, so its headers are all it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
rm -rf .deps
mkdir -p .deps/include
cp -r /usr/src/googletest .deps/googletest
cp -r /usr/include/nlohmann .deps/include/nlohmann
cp -r /usr/include/CLI .deps/include/CLI
cp -r /usr/include/fmt .deps/include/fmt
du -sh .deps
