package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/pgrepl"
)

// fileDLQPath is where the file source's dead letters go: dlq.path, or
// "<source.file.path>.dlq.jsonl".
func fileDLQPath(cfg Config) string {
	if cfg.DLQ.Path != "" {
		return filepath.Clean(cfg.DLQ.Path)
	}
	return filepath.Clean(cfg.Source.File.Path + ".dlq.jsonl")
}

// fileDLQ returns the file source's dead-letter file; replay appends to
// source.file.path.
func fileDLQ(cfg Config, action string) ([]dlqStore, func(), error) {
	if cfg.Source.File.Path == "" && cfg.DLQ.Path == "" {
		return nil, nil, errors.New("dlq: source.file.path is empty; set it (or dlq.path) to find the file source's dead letters")
	}
	if action == "replay" && cfg.Source.File.Path == "" {
		return nil, nil, errors.New("dlq replay: source.file.path is empty; set it to the file to replay into")
	}
	path := fileDLQPath(cfg)
	s := fileDLQStore(file.NewDeadLetterFile(path, cfg.Source.File.Path))
	s.replayed = func(n int) string {
		return fmt.Sprintf("%s: replayed %d record(s) to the end of %s", path, n, cfg.Source.File.Path)
	}
	return []dlqStore{s}, func() {}, nil
}

// postgresDLQ returns the Postgres source's dead-letter file. Replay moves
// the dead letters to the replay file beside it, which serve's Postgres
// source applies (each change with its own version, so one that a later
// change superseded is skipped) before it streams, and then empties.
func postgresDLQ(cfg Config) ([]dlqStore, func(), error) {
	st := pgrepl.DeadLetterFile(postgresDLQPath(cfg))
	s := fileDLQStore(st)
	s.replayed = func(n int) string {
		return fmt.Sprintf("%s: queued %d change(s) in %s; serve applies them when it next starts (restart it if it is running)", st.Path(), n, st.ReplayTo())
	}
	return []dlqStore{s}, func() {}, nil
}

// fileDLQStore prints the dead letters of a dead-letter file by their line.
func fileDLQStore(st *file.DeadLetterFile) dlqStore {
	path := st.Path()
	return dlqStore{
		DeadLetterStore: st,
		name:            path,
		text: func(d cdc.DeadLetter) string {
			return fmt.Sprintf("%s:%d  from %s line %d  %s  %s\n    %s", path, d.Offset, orDefault(d.OrigTopic, "(no topic)"),
				d.OrigOffset, d.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), d.ErrorClass, d.ErrorMessage)
		},
		where: func(d cdc.DeadLetter) map[string]any { return map[string]any{"file": path, "line": d.Offset} },
	}
}
