package main

import (
	"errors"
	"fmt"

	"github.com/ragsync/ragsync/pipeline"
)

// Exit codes of ragsync. Scripts and cron jobs branch on them, so they are
// a contract: documented in the README ("Exit codes"), never renumbered.
// Commands that finish a bounded run (serve --once, backfills, checks)
// return an *exitError to pick one; any other error exits ExitFailure.
const (
	// ExitOK: the run finished; with serve --once, the source was drained
	// and nothing was dead-lettered.
	ExitOK = 0
	// ExitFailure: the command failed (invalid configuration, a dependency
	// that refused, a fatal error); the message says why.
	ExitFailure = 1
	// ExitDeadLetters: the run drained its source but dead-lettered at
	// least one message; `ragsync dlq list` shows them.
	ExitDeadLetters = 3
	// ExitNothingMatched: every change the run saw was for a table that no
	// tables[].match selects, so nothing was indexed; check tables[].match.
	ExitNothingMatched = 4
	// ExitInterrupted: a signal stopped the run before it drained its
	// source; what was applied is committed, a rerun continues.
	ExitInterrupted = 5
	// ExitNotYet: query --after waited --after-timeout and the index's
	// watermark did not pass the position or time: the index may not hold
	// the change yet, so no hits were printed; ask again later.
	ExitNotYet = 6
	// ExitHardStop: a second SIGINT/SIGTERM ended a drain that hung
	// (128 + SIGINT, as shells report it).
	ExitHardStop = 130
)

// exitError carries a non-zero exit code with the message cobra prints.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode maps what a command returned to the process's exit status.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailure
}

// onceOutcome is how a bounded run ended, as an exit code: drained says
// whether the source was consumed to its end (false: a signal stopped it
// first). lenient (--lenient) keeps exit 0 for dead letters and for
// changes of unconfigured tables, the behaviour before exit codes; a run
// stopped before draining is never reported as done.
func onceOutcome(s pipeline.Snapshot, drained, lenient bool) error {
	switch {
	case !drained:
		return &exitError{ExitInterrupted, errors.New("stopped before the source was drained; run again to continue (what was applied is committed)")}
	case lenient:
		return nil
	case s["dead_lettered"] > 0:
		return &exitError{ExitDeadLetters, fmt.Errorf("finished with %d dead letter(s); see them with `ragsync dlq list` (--lenient exits 0)", s["dead_lettered"])}
	case s["unmatched_table"] > 0 && s["applied"]+s["stale"]+s["duplicate"] == 0:
		return &exitError{ExitNothingMatched, fmt.Errorf("nothing matched the configured tables: all %d change(s) were for tables no tables[].match selects; check tables[].match against the Debezium source schema.table (`ragsync inspect` shows it), or --lenient exits 0", s["unmatched_table"])}
	}
	return nil
}
