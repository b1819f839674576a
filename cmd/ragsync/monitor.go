package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/service"
)

// openMonitor opens the index (reading: it creates nothing) and a monitor
// that publishes nothing and takes no canary baseline: the commands below
// read and report, serve publishes and takes the baselines.
func openMonitor(ctx context.Context, cmd *cobra.Command, g *globals) (*monitor.Monitor, func(), error) {
	cfg, err := g.loadValid(false)
	if err != nil {
		return nil, nil, err
	}
	logger := newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false)
	ix, err := openIndexRead(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	m, closeMon, err := service.OpenMonitor(ctx, cfg.monitorConfig(), ix, logger)
	if err != nil {
		ix.Close()
		return nil, nil, err
	}
	return m, func() { closeMon(); ix.Close() }, nil
}

func newMonitorCmd(g *globals) *cobra.Command {
	var (
		watch  bool
		asJSON bool
		every  time.Duration
		sample int
	)
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Show the fused monitor status: fidelity, drift, query drift, errors",
		Long: `monitor runs one check of the index the way serve's monitor does — canary
probes re-embedded and compared, the drift windows serve persisted compared
with each other — and prints every signal with its score, threshold and
state, and who took the canary baselines. It is read-only: it publishes
nothing, takes no canary baseline (serve or ragsync monitor baseline does)
and leaves the persisted windows alone; the stored-vector sample is off
unless --sample N asks for it (it spends tokens, and records its
measurements).
--watch repeats every --every until interrupted.

Example:
  ragsync monitor --config ragsync.yaml
  ragsync monitor --watch --every 30s
  ragsync monitor --json | jq '.events[] | select(.signal.exceeded)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, closeFn, err := openMonitor(ctx, cmd, g)
			if err != nil {
				return err
			}
			defer closeFn()
			for {
				st, err := m.Check(ctx, monitor.CheckOptions{SampleSize: sampleOrOff(sample), NoPublish: true, NoSave: true})
				if err != nil && ctx.Err() == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "monitor: part of the check failed: %v\n", err)
				}
				if ctx.Err() != nil {
					return nil
				}
				if err := st.Write(cmd.OutOrStdout(), asJSON); err != nil {
					return err
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "repeat the check every --every until interrupted")
	cmd.Flags().DurationVar(&every, "every", 30*time.Second, "interval of --watch")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status (fused events included) as JSON")
	cmd.Flags().IntVar(&sample, "sample", 0, "also re-embed N stored chunks (spends tokens)")
	cmd.AddCommand(newMonitorReferenceCmd(g), newMonitorBaselineCmd(g))
	return cmd
}

func newMonitorBaselineCmd(g *globals) *cobra.Command {
	var reset, show bool
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "Take the canary baselines the index lacks (--reset: all again), or --show who took them",
		Long: `baseline embeds the canary probes (monitor.canaries, or the shipped ones) that
have no baseline yet with the configured embedder and stores them; the canary
check compares every later embedding of a probe with its baseline. serve
takes the missing ones at its first check; no other command takes any.
--reset forgets every baseline of the index first and takes them all again,
after a baseline was taken against the wrong endpoint or model. Each
baseline records the command that took it; --show prints that and takes
nothing.

Example:
  ragsync monitor baseline --show --config ragsync.yaml
  ragsync monitor baseline --reset --config ragsync.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, closeFn, err := openMonitor(cmd.Context(), cmd, g)
			if err != nil {
				return err
			}
			defer closeFn()
			out := cmd.OutOrStdout()
			if !show {
				n, err := m.TakeBaselines(cmd.Context(), reset, "monitor baseline")
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "canary baselines taken: %d\n", n)
			}
			b, err := m.Baselines(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(out, b.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&reset, "reset", false, "forget every baseline of the index and take them all again")
	cmd.Flags().BoolVar(&show, "show", false, "print who took the baselines and when; take none")
	cmd.MarkFlagsMutuallyExclusive("reset", "show")
	return cmd
}

// sampleOrOff maps a flag's 0 ("not asked") to "no sample".
func sampleOrOff(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

func newMonitorReferenceCmd(g *globals) *cobra.Command {
	var reset, queries bool
	cmd := &cobra.Command{
		Use:   "reference",
		Short: "Pin the drift reference to a sample of the index as it is now",
		Long: `reference --reset replaces the drift reference window with a uniform sample
of monitor.reference_size chunk vectors of the index as it is now, and
empties the current window, which refills with the chunks written afterwards.
Use it after a deliberate change (a new corpus, a re-embed) so drift is
measured from there. A running serve picks the new reference up at its next
check.

With --queries it pins the query reference instead: the recent front-door
queries (the last monitor.query_reference_size, as serve last saved them)
become the reference query drift is measured from, after users' questions
changed on purpose (a new product, a new audience).

Example:
  ragsync monitor reference --reset --config ragsync.yaml
  ragsync monitor reference --reset --queries --config ragsync.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !reset {
				return fmt.Errorf("nothing to do: pass --reset to pin a new drift reference")
			}
			m, closeFn, err := openMonitor(cmd.Context(), cmd, g)
			if err != nil {
				return err
			}
			defer closeFn()
			if queries {
				n, err := m.ResetQueryReference(cmd.Context())
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "query drift reference pinned: %d recent queries\n", n)
				return err
			}
			n, err := m.ResetReference(cmd.Context())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "drift reference pinned: %d chunk vectors\n", n)
			return err
		},
	}
	cmd.Flags().BoolVar(&reset, "reset", false, "pin a new reference (required)")
	cmd.Flags().BoolVar(&queries, "queries", false, "pin the query reference to the recent front-door queries instead of the chunk reference")
	return cmd
}

func newFidelityCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "fidelity",
		Short: "Context-fidelity checks of the stored vectors",
	}
	var (
		sample int
		asJSON bool
	)
	check := &cobra.Command{
		Use:   "check",
		Short: "Re-embed the canaries and a sample of stored chunks; exit non-zero on a breach",
		Long: `check re-embeds the canary probes and a sample of stored chunks (weighted to
reused vectors and old cache entries, plus a uniform share) with the
configured embedder, compares them with what the index holds, records the
measurements (what ragsync repair acts on) and prints the distances by kind.
It creates nothing else: canaries without a baseline are skipped (serve, or
ragsync monitor baseline, takes them).
It exits with status 1 when a fidelity signal is past its threshold, so cron
and CI can use it.

Example:
  ragsync fidelity check --config ragsync.yaml --sample 200
  ragsync fidelity check --json || alert "the model behind the name changed"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, closeFn, err := openMonitor(cmd.Context(), cmd, g)
			if err != nil {
				return err
			}
			defer closeFn()
			st, err := m.Check(cmd.Context(), monitor.CheckOptions{SampleSize: sample, NoPublish: true, NoSave: true})
			if err != nil {
				return err
			}
			var breached []string
			var fid []monitor.Event
			for _, e := range st.Events {
				if e.SemanticTag != monitor.TagFidelity {
					continue
				}
				fid = append(fid, e)
				if e.Signal.Exceeded {
					breached = append(breached, fmt.Sprintf("%s %.4g > %.4g", e.Signal.Method, e.Signal.Score, e.Signal.Threshold))
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := json.NewEncoder(out).Encode(map[string]any{"aggregates": st.Fidelity, "sample": st.Sample, "events": fid, "breach": len(breached) > 0}); err != nil {
					return err
				}
			} else {
				if st.Sample != nil {
					fmt.Fprintln(out, st.Sample.String())
				}
				if err := monitor.WriteAggregates(out, st.Fidelity); err != nil {
					return err
				}
				for _, e := range fid {
					if s := e.Signal.Storage; s != nil {
						fmt.Fprintf(out, "%s %s\n", e.Signal.Method, s)
					}
				}
				fmt.Fprintln(out, st.Baselines.String())
			}
			if len(breached) > 0 {
				return fmt.Errorf("fidelity breach: %s (ragsync repair re-embeds the chunks past the bound; a changed model needs a new index)",
					strings.Join(breached, "; "))
			}
			return nil
		},
	}
	check.Flags().IntVar(&sample, "sample", 0, "stored chunks to re-embed (default monitor.sample_size)")
	check.Flags().BoolVar(&asJSON, "json", false, "print aggregates and events as JSON")
	root.AddCommand(check)
	return root
}
