#!/usr/bin/env bash
# Installs the Debian packages the build needs (when missing) and checks that
# the CUDA toolkit is present. Needs root for apt-get.
set -euo pipefail
packages=(cmake ninja-build g++ googletest libgtest-dev nlohmann-json3-dev libcli11-dev libfmt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc >/dev/null; then
  echo "error: nvcc (CUDA 13 toolkit) not found; install it under /usr/local/cuda" >&2
  exit 1
fi
