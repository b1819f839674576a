package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

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
answered degraded); otherwise the CDC dead-letter topic <topic>.ragsync-dlq
(messages that could not be decoded or applied).

Replay re-injects them — after you fixed the config or the dependency —
and removes them from the dead-letter stream.`,
		Example: `  ragsync dlq list --config ragsync.yaml
  ragsync dlq replay --config ragsync.yaml --frontdoor
  ragsync dlq purge --config ragsync.yaml --frontdoor`,
	}
	cmd.PersistentFlags().BoolVar(&f.frontdoor, "frontdoor", false, "work on the query front door's dead-letter stream instead of the CDC topic")
	list := &cobra.Command{
		Use:   "list",
		Short: "Print dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "list") },
	}
	list.Flags().IntVarP(&f.n, "n", "n", 100, "print at most this many")
	list.Flags().BoolVar(&f.asJSON, "json", false, "print JSON lines")
	cmd.AddCommand(list,
		&cobra.Command{
			Use:   "replay",
			Short: "Re-inject every dead letter and remove it from the dead-letter stream",
			Args:  cobra.NoArgs,
			RunE:  func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "replay") },
		},
		&cobra.Command{
			Use:   "purge",
			Short: "Delete every dead letter",
			Args:  cobra.NoArgs,
			RunE:  func(cmd *cobra.Command, _ []string) error { return dlqRun(cmd, g, f, "purge") },
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
		return kafkaDLQ(cmd, cfg, f, action)
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
