package main

import "path/filepath"

// postgresDLQPath is where the Postgres source's dead letters go: dlq.path,
// or "ragsync-<slot>.dlq.jsonl".
func postgresDLQPath(cfg Config) string {
	if cfg.DLQ.Path != "" {
		return filepath.Clean(cfg.DLQ.Path)
	}
	slot := cfg.Source.Postgres.Slot
	if slot == "" {
		slot = "ragsync"
	}
	return "ragsync-" + slot + ".dlq.jsonl"
}
