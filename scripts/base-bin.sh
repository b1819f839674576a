#!/usr/bin/env bash
# Builds ragsync at a git revision (a baseline for the benches' before/after
# ratios) into OUT, from a copy of that revision's tree, leaving the work
# tree alone.
#   scripts/base-bin.sh REV OUT
set -euo pipefail
rev=${1:?usage: scripts/base-bin.sh REV OUT}
out=${2:?usage: scripts/base-bin.sh REV OUT}
commit=$(git rev-parse --verify "$rev^{commit}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$commit" | tar -x -C "$tmp"
echo "base-bin: building ragsync at $rev ($commit) into $out"
mkdir -p "$(dirname "$out")"
abs_out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
(cd "$tmp" && GOFLAGS=-mod=mod ${GO:-go} build -o "$abs_out" ./cmd/ragsync)
