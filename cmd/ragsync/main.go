// Command ragsync keeps a pgvector index in sync with a document database
// from Debezium change events.
package main

import (
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}
