#!/usr/bin/env bash
# Run HERE before an A/B device call: unpacks revision REV's tree into
# ab-base/ (git-ignored; name it in the device call's carry, with .deps),
# the "A" side for scripts/ab-bench.sh and scripts/ab-suite.sh. The device
# copy's git metadata can be stale, so trees travel as files rather than
# as revisions.
# Usage: bash scripts/ab-prepare.sh REV                 (e.g. main, HEAD~1, a1b2c3d)
#        bash scripts/ab-prepare.sh --variant NAME REV  (REV into ab-var/NAME/, a
#          "B" side for scripts/ab-suite.sh; carry ab-var too)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --variant ]; then
  name="${2:?usage: scripts/ab-prepare.sh --variant NAME REV}"
  rev="${3:?usage: scripts/ab-prepare.sh --variant NAME REV}"
  case "$name" in *[!A-Za-z0-9_-]*) echo "error: variant name '$name': letters, digits, - and _ only" >&2; exit 2 ;; esac
  dest="ab-var/$name"
else
  rev="${1:?usage: scripts/ab-prepare.sh REV | --variant NAME REV}"
  dest=ab-base
fi
sha="$(git rev-parse --verify --short "$rev^{commit}")"
rm -rf "$dest"
mkdir -p "$dest"
git archive "$sha" | tar -x -C "$dest"
echo "$sha" >"$dest/.ab-rev"
echo "$dest/ = $rev ($sha), $(du -sh "$dest" | cut -f1); carry [\".deps\", \"ab-base\"$([ "$dest" = ab-base ] || echo ', "ab-var"')]"
