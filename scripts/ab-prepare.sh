#!/usr/bin/env bash
# Run HERE before an A/B device call: unpacks revision REV's tree into
# ab-base/ (git-ignored; name it in the device call's carry, with .deps),
# the "A" side for scripts/ab-bench.sh. The device copy's git metadata can be
# stale, so the base tree travels as files rather than as a revision.
# Usage: bash scripts/ab-prepare.sh REV      (e.g. main, HEAD~1, a1b2c3d)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/ab-prepare.sh REV}"
sha="$(git rev-parse --verify --short "$rev^{commit}")"
rm -rf ab-base
mkdir ab-base
git archive "$sha" | tar -x -C ab-base
echo "$sha" >ab-base/.ab-rev
echo "ab-base/ = $rev ($sha), $(du -sh ab-base | cut -f1); carry [\".deps\", \"ab-base\"] and run scripts/ab-bench.sh"
