#!/usr/bin/env bash
# Prints a fingerprint of the source tree's contents: sha256 over every file
# git would track here (tracked or untracked-but-not-ignored), in path order.
# The device copy of the tree can carry stale git metadata, so its HEAD does
# not say what was measured; this does. Run it here and compare it with the
# "tree" line of a gpu-check summary.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files -z --cached --others --exclude-standard 2>/dev/null |
  while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
