package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/fallback"
)

// dlqFlags selects which dead letters a dlq subcommand works on.
type dlqFlags struct {
	frontdoor bool
	n         int
	asJSON    bool
}

func newDLQCmd(g *globals) *cobra.Command {
	f := &dlqFlags{}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, replay or purge dead letters",
		Long: `dlq works on dead letters: with --frontdoor, the query front door's
<prefix>:requests:dlq stream (requests that failed every delivery and were
answered degraded); otherwise those of the configured source (messages that
could not be decoded or applied): for source.kind kafka the dead-letter
topic(s) dlq.topic or <topic>.ragsync-dlq, for source.kind file the file
dlq.path or <source.file.path>.dlq.jsonl, for source.kind postgres the file
dlq.path or ragsync-<slot>.dlq.jsonl (each holds the change as JSON).

Replay re-injects them — after you fixed the config or the dependency —
once, without the error headers.`,
		Example: `  ragsync dlq list --config ragsync.yaml
  ragsync dlq replay --config ragsync.yaml --frontdoor
  ragsync dlq purge --config ragsync.yaml --frontdoor`,
	}
	cmd.PersistentFlags().BoolVar(&f.frontdoor, "frontdoor", false, "work on the query front door's dead-letter stream instead of the CDC topic")
	list := &cobra.Command{
		Use:   "list",
		Short: "Print dead letters, oldest first",
		Long: `list prints dead letters oldest first, each with where it came from (topic,
partition and offset; for a file source, the line) and why it failed (error
class and message, from the __connect.errors.* headers). --frontdoor lists
the front door's dead requests with their reason and attempts.

Example:
  ragsync dlq list --config ragsync.yaml -n 20
  ragsync dlq list --config ragsync.yaml --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "list") },
	}
	list.Flags().IntVarP(&f.n, "n", "n", 100, "print at most this many")
	list.Flags().BoolVar(&f.asJSON, "json", false, "print JSON lines")
	cmd.AddCommand(list,
		&cobra.Command{
			Use:   "replay",
			Short: "Re-inject every dead letter once, without its error headers",
			Long: `replay re-injects every dead letter once, as it was consumed (the error
headers removed): a Kafka dead letter goes back to its original topic (a
consumer group on the dead-letter topic remembers how far replay got), a
file source's dead letters are appended to source.file.path and their file
is emptied, a Postgres source's dead letters are queued in <dlq file>.replay
(each row read again when applied), --frontdoor puts requests back on
<prefix>:requests (ids already answered are not answered twice). Fix the
cause first: the config, the connector, or the dependency that was down.

A Postgres source applies the queued changes only when serve starts: a
running serve does not see them, so restart it after the replay.

Example:
  ragsync dlq replay --config ragsync.yaml
  ragsync dlq replay --config ragsync.yaml --frontdoor`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "replay") },
		},
		&cobra.Command{
			Use:   "purge",
			Short: "Delete every dead letter",
			Long: `purge deletes every dead letter: it deletes the records of the Kafka
dead-letter topic(s), empties the file source's dead-letter file, or with
--frontdoor deletes the front door's dead-letter stream entries. What is
purged cannot be replayed.

Example:
  ragsync dlq purge --config ragsync.yaml
  ragsync dlq purge --config ragsync.yaml --frontdoor`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "purge") },
		},
	)
	return cmd
}

func dlqRun(cmd *cobra.Command, g *globals, f *dlqFlags, action string) error {
	cfg, err := g.load()
	if err != nil {
		return err
	}
	if !f.frontdoor {
		var stores []dlqStore
		var closeStores func()
		switch cfg.Source.Kind {
		case "file":
			stores, closeStores, err = fileDLQ(cfg, action)
		case "postgres":
			stores, closeStores, err = postgresDLQ(cfg)
		default:
			stores, closeStores, err = kafkaDLQ(cfg)
		}
		if err != nil {
			return err
		}
		defer closeStores()
		return driveDLQ(cmd, stores, f, action)
	}
	ctx := cmd.Context()
	fcfg := cfg.frontDoorConfig()
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Admin only: no embedder or searcher, so this front door cannot Run.
	fd, err := fallback.NewFrontDoor(fcfg, rdb, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch action {
	case "list":
		dls, err := fd.DLQList(ctx, f.n)
		if err != nil {
			return err
		}
		if len(dls) == 0 {
			fmt.Fprintln(out, "no dead letters")
			return nil
		}
		for _, d := range dls {
			if f.asJSON {
				b, err := json.Marshal(d)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
				continue
			}
			fmt.Fprintf(out, "%s  id=%s attempts=%d tenant=%q query=%q\n    reason: %s\n", d.FailedAt.Format("2006-01-02T15:04:05Z07:00"), d.ID, d.Attempts, d.Tenant, snippet(d.Query, 80), d.Reason)
		}
	case "replay":
		n, err := fd.DLQReplay(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "replayed %d request(s) to %s:requests\n", n, fcfg.Prefix)
	case "purge":
		n, err := fd.DLQPurge(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "purged %d dead letter(s)\n", n)
	default:
		return errors.New("unknown dlq action " + action)
	}
	return nil
}

// dlqStore is one dead-letter store of the configured source (a topic, a
// file) and how the dlq command prints what it finds there.
type dlqStore struct {
	cdc.DeadLetterStore
	// name is the topic or file, which starts every line printed.
	name string
	// text renders a dead letter for list (without the final newline);
	// where gives the fields that say where it sits, for list --json.
	text  func(d cdc.DeadLetter) string
	where func(d cdc.DeadLetter) map[string]any
	// replayed says what replay did with n dead letters.
	replayed func(n int) string
}

// driveDLQ runs action on each store in turn, printing as it goes.
func driveDLQ(cmd *cobra.Command, stores []dlqStore, f *dlqFlags, action string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	for _, s := range stores {
		switch action {
		case "list":
			dls, err := s.List(ctx, f.n)
			if err != nil {
				return err
			}
			if len(dls) == 0 && !f.asJSON {
				fmt.Fprintf(out, "%s: no dead letters\n", s.name)
			}
			for _, d := range dls {
				if !f.asJSON {
					fmt.Fprintln(out, s.text(d))
					continue
				}
				fields := map[string]any{
					"timestamp": d.Timestamp, "original_topic": d.OrigTopic, "original_partition": d.OrigPartition,
					"original_offset": d.OrigOffset, "error_class": d.ErrorClass, "error": d.ErrorMessage,
					"key": string(d.Key), "value_bytes": len(d.Value),
				}
				maps.Copy(fields, s.where(d))
				b, err := json.Marshal(fields)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
			}
		case "replay":
			n, err := s.Replay(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, s.replayed(n))
		case "purge":
			n, err := s.Purge(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: purged %d record(s)\n", s.name, n)
		default:
			return errors.New("unknown dlq action " + action)
		}
	}
	return nil
}
