package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/service"
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
dlq.path or ragsync-<slot>.dlq.jsonl (each holds the change as JSON), for
source.kind redis-streams the stream(s) <stream>.ragsync-dlq.

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
partition and offset; for a Redis stream, the entry id; for a file source,
the line) and why it failed (error
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
is emptied, a Redis Streams dead letter goes back to its original stream and
is deleted from the dead-letter stream in one step, a Postgres source's dead
letters are queued in <dlq file>.replay
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
dead-letter topic(s) or the entries of the Redis dead-letter stream(s),
empties the file source's dead-letter file, or with
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
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	if !f.frontdoor {
		stores, closeStores, err := service.OpenDeadLetters(cfg.sourceConfig(), action)
		if err != nil {
			return err
		}
		defer closeStores()
		for _, s := range stores {
			if err := driveDLQ(ctx, out, s, f, action); err != nil {
				return err
			}
		}
		return nil
	}
	fcfg := cfg.FrontDoorConfig()
	fd, closeFD, err := service.OpenFrontDoorAdmin(ctx, fcfg)
	if err != nil {
		return err
	}
	defer closeFD()
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

// driveDLQ runs action on one store of the configured source, printing as
// it goes: each dead letter starts with where it sits (topic/partition@offset,
// or file:line) and says where it came from and why it failed.
func driveDLQ(ctx context.Context, out io.Writer, s service.DeadLetters, f *dlqFlags, action string) error {
	switch action {
	case "list":
		dls, err := s.List(ctx, f.n)
		if err != nil {
			return err
		}
		if len(dls) == 0 && !f.asJSON {
			fmt.Fprintf(out, "%s: no dead letters\n", s.Name)
		}
		for _, d := range dls {
			switch {
			case f.asJSON:
				fields := map[string]any{
					"timestamp": d.Timestamp, "original_topic": d.OrigTopic, "original_partition": d.OrigPartition,
					"original_offset": d.OrigOffset, "error_class": d.ErrorClass, "error": d.ErrorMessage,
					"key": string(d.Key), "value_bytes": len(d.Value), "file": s.Name, "line": d.Offset,
				}
				switch {
				case s.Topic:
					delete(fields, "file")
					delete(fields, "line")
					fields["topic"], fields["partition"], fields["offset"] = s.Name, d.Partition, d.Offset
				case s.Stream:
					delete(fields, "file")
					delete(fields, "line")
					fields["stream"], fields["entry_id"] = s.Name, redisstream.EntryID(d.Offset)
					if d.OrigOffset >= 0 {
						fields["original_entry_id"] = redisstream.EntryID(d.OrigOffset)
					}
				}
				b, err := json.Marshal(fields)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
			case s.Topic:
				fmt.Fprintf(out, "%s/%d@%d  from %s/%d@%d  %s\n    %s\n", s.Name, d.Partition, d.Offset,
					d.OrigTopic, d.OrigPartition, d.OrigOffset, d.ErrorClass, d.ErrorMessage)
			case s.Stream:
				from := "?"
				if d.OrigOffset >= 0 {
					from = redisstream.EntryID(d.OrigOffset)
				}
				fmt.Fprintf(out, "%s@%s  from %s@%s  %s\n    %s\n", s.Name, redisstream.EntryID(d.Offset),
					orDefault(d.OrigTopic, "(no stream)"), from, d.ErrorClass, d.ErrorMessage)
			default:
				fmt.Fprintf(out, "%s:%d  from %s line %d  %s  %s\n    %s\n", s.Name, d.Offset, orDefault(d.OrigTopic, "(no topic)"),
					d.OrigOffset, d.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), d.ErrorClass, d.ErrorMessage)
			}
		}
	case "replay":
		n, err := s.Replay(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, s.Replayed(n))
	case "purge":
		n, err := s.Purge(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: purged %d record(s)\n", s.Name, n)
	default:
		return errors.New("unknown dlq action " + action)
	}
	return nil
}
