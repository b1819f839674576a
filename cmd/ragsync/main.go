// Command ragsync keeps a pgvector index in sync with a document database
// from Debezium change events.
package main

import (
	"os"

	"golang.org/x/term"

	"github.com/ragsync/ragsync/internal/redact"
)

func main() {
	// Whether stderr is a terminal is found here, on the process's own
	// stderr, before the commands wrap it in the password-masking writer.
	g := &globals{red: redact.New(), stderrTTY: isTerminal(os.Stderr)}
	// Cobra has printed the error; the code tells scripts which kind
	// (exitcode.go).
	err := newRoot(g).Execute()
	flushLogs() // repeat counts held back by the loggers
	os.Exit(exitCode(err))
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
