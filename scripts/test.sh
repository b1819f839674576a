#!/usr/bin/env bash
# test.sh is `make test` after `make services`: it builds the race binary the
# end-to-end tests run, then every package's tests with -race, and says what
# it is doing as it goes: a line before each phase, a line when each
# package's tests start and go test's own `ok`/`FAIL` line as each package
# finishes (scripts/testprogress), the full output of any failed test, and a
# line naming what is still running after each minute of silence. The exit
# code is go test's: non-zero when a build or a test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TEST_FLAGS=${TEST_FLAGS:--race -count=1 -timeout 30m}
PKGS=${PKGS:-./...}
# The end-to-end package first: go test runs two packages at a time on two
# cores and starts them in the order given, so the longest one (./tests,
# most of the run) goes alongside all the others instead of after them.
if [[ $PKGS == ./... ]]; then
  PKGS="./tests ./..."
fi
start=$(date +%s)

say() { printf '=== %s %s\n' "$(elapsed)" "$*"; }
# elapsed prints the time since start as Go prints durations (1m5s), as
# testprogress does.
elapsed() {
  local s=$(( $(date +%s) - start ))
  if (( s >= 60 )); then printf '%dm%ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# heartbeat LABEL CMD...: runs CMD, printing a line per minute it runs.
heartbeat() {
  local label=$1; shift
  "$@" &
  local pid=$! n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    n=$((n + 5))
    if (( n % 60 == 0 )) && kill -0 "$pid" 2>/dev/null; then
      printf '... %s %s: still building\n' "$(elapsed)" "$label"
    fi
  done
  wait "$pid"
}

"$GO" build -o bin/testprogress ./scripts/testprogress
say "building bin/ragsync-race with the race detector (the end-to-end tests run it): seconds when the build cache is warm, several minutes on 2 cores when it is cold"
heartbeat "bin/ragsync-race" "$GO" build -race -o bin/ragsync-race ./cmd/ragsync
npkg=$("$GO" list $PKGS | wc -l)
say "testing $npkg packages with $TEST_FLAGS: each package's test binary is compiled with -race first (minutes on a cold cache), then runs; its ok/FAIL line prints as it finishes, and the end-to-end package ./tests takes longest (its fault, rebalance and slot-kill tests run in parallel)"
# shellcheck disable=SC2086 # TEST_FLAGS and PKGS are word lists
E2E_RAGSYNC_BIN=$PWD/bin/ragsync-race "$GO" test -json $TEST_FLAGS $PKGS 2>&1 | bin/testprogress "$npkg" "$start"
