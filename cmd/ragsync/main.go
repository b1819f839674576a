// Command ragsync keeps a pgvector index in sync with a document database
// from Debezium change events.
package main

import (
	"os"
)

func main() {
	// Cobra has printed the error; the code tells scripts which kind
	// (exitcode.go).
	err := newRootCmd().Execute()
	flushLogs() // repeat counts held back by the loggers
	os.Exit(exitCode(err))
}
