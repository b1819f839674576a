package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

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

// fileDLQ works on the file source's dead-letter file.
func fileDLQ(cmd *cobra.Command, cfg Config, f *dlqFlags, action string) error {
	if cfg.Source.File.Path == "" && cfg.DLQ.Path == "" {
		return errors.New("dlq: source.file.path is empty; set it (or dlq.path) to find the file source's dead letters")
	}
	path := fileDLQPath(cfg)
	out := cmd.OutOrStdout()
	switch action {
	case "list":
		return listFileDLQ(cmd, path, f)
	case "replay":
		if cfg.Source.File.Path == "" {
			return errors.New("dlq replay: source.file.path is empty; set it to the file to replay into")
		}
		n, err := file.DLQReplay(path, cfg.Source.File.Path)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: replayed %d record(s) to the end of %s\n", path, n, cfg.Source.File.Path)
	case "purge":
		return purgeFileDLQ(cmd, path)
	default:
		return errors.New("unknown dlq action " + action)
	}
	return nil
}

// postgresDLQ works on the Postgres source's dead-letter file. Replay moves
// the dead letters to the replay file beside it, which serve's Postgres
// source applies (each change with its own version, so one that a later
// change superseded is skipped) before it streams, and then empties.
func postgresDLQ(cmd *cobra.Command, cfg Config, f *dlqFlags, action string) error {
	path := postgresDLQPath(cfg)
	switch action {
	case "list":
		return listFileDLQ(cmd, path, f)
	case "replay":
		to := pgrepl.ReplayPath(path)
		n, err := file.DLQReplay(path, to)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: queued %d change(s) in %s; serve applies them when it next starts (restart it if it is running)\n", path, n, to)
		return nil
	case "purge":
		return purgeFileDLQ(cmd, path)
	}
	return errors.New("unknown dlq action " + action)
}

// purgeFileDLQ empties a dead-letter file.
func purgeFileDLQ(cmd *cobra.Command, path string) error {
	n, err := file.DLQPurge(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: purged %d record(s)\n", path, n)
	return nil
}

// listFileDLQ prints a dead-letter file's records.
func listFileDLQ(cmd *cobra.Command, path string, f *dlqFlags) error {
	out := cmd.OutOrStdout()
	{ // one block, so the list reads as it did inside fileDLQ's switch
		dls, err := file.DLQList(path, f.n)
		if err != nil {
			return err
		}
		if len(dls) == 0 && !f.asJSON {
			fmt.Fprintf(out, "%s: no dead letters\n", path)
		}
		for _, d := range dls {
			if f.asJSON {
				b, err := json.Marshal(map[string]any{
					"file": path, "line": d.Offset, "timestamp": d.Timestamp,
					"original_topic": d.OrigTopic, "original_partition": d.OrigPartition, "original_offset": d.OrigOffset,
					"error_class": d.ErrorClass, "error": d.ErrorMessage, "key": string(d.Key), "value_bytes": len(d.Value),
				})
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
				continue
			}
			fmt.Fprintf(out, "%s:%d  from %s line %d  %s  %s\n    %s\n", path, d.Offset, orDefault(d.OrigTopic, "(no topic)"),
				d.OrigOffset, d.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), d.ErrorClass, d.ErrorMessage)
		}
	}
	return nil
}
