package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/service"
)

func newServeCmd(g *globals) *cobra.Command {
	var once, lenient, monitorOnce, adopt, createIndex bool
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the sync pipeline (and /metrics, /healthz, /readyz)",
		Long: `serve consumes change events from the configured source and keeps the index in
sync until it is stopped (SIGINT/SIGTERM; a second signal exits at once).

With --once it drains the source and exits with a summary of what it did: a
file source up to its end, a Kafka source up to the end offsets its group saw
at start. The exit code says how the run ended (see the README's "Exit
codes"): 0 drained with nothing dead-lettered, 3 finished with dead letters,
4 nothing matched the configured tables, 5 stopped by a signal before
draining, 1 failed. --lenient exits 0 for dead letters and unmatched tables.
The monitor does not run with --once unless --monitor is given: then it
checks every monitor.interval during the drain, publishes its events, and
the summary adds its check and token counts.

Without --once, a file source with follow: false also stops at the end of the
file, unless the front door is enabled: then serve keeps answering queries
until it is stopped.

serve creates the configured index when the schema has none yet. Beside
existing indexes an unknown index: is refused, naming the nearest one,
before the source is opened (a typo would otherwise apply the source's
changes to a new empty index and move the source past the real one);
--create-index creates it anyway.`,
		Example: `  ragsync serve --config ragsync.yaml
  ragsync serve --config ragsync.yaml --set source.kind=file --set source.file.path=events.jsonl --once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if monitorOnce && !once {
				return errors.New("--monitor only applies with --once (serve always runs the monitor unless monitor.enabled is false)")
			}
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if err := cfg.Validate(true); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			if adopt {
				cfg.Source.Postgres.AdoptMove = true
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The hard-stop watcher ends with serve: left running, it would
			// turn any later SIGINT of the process (a test binary, a caller
			// embedding the command) into exit 130.
			done := make(chan struct{})
			var watcher sync.WaitGroup
			watcher.Add(1)
			go func() { defer watcher.Done(); exitOnSecondSignal(ctx, done) }()
			defer watcher.Wait()
			defer close(done)
			if cpuProfile != "" {
				stopProfile, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			return serve(ctx, cmd, g, cfg, once, lenient, monitorOnce, createIndex)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "drain the source (file to its end, Kafka to the offsets seen at start), print a summary and exit with a code saying how it ended")
	cmd.Flags().BoolVar(&lenient, "lenient", false, "with --once, exit 0 even with dead letters or when no change matched the configured tables")
	cmd.Flags().BoolVar(&monitorOnce, "monitor", false, "with --once, run the monitor during the drain too (unless monitor.enabled is false)")
	cmd.Flags().BoolVar(&adopt, "adopt-source", false, "with the Postgres source: accept that the source database moved (its system identifier changed: a dump/restore, an upgrade, another server); every table is loaded again and the load replaces the old server's documents")
	cmd.Flags().BoolVar(&createIndex, "create-index", false, "create the configured index even though the schema holds other indexes (without it, an unknown index: beside them is refused as a likely typo)")
	cmd.Flags().StringVar(&cpuProfile, "cpu-profile", "", "write a Go CPU profile of the run to this file (read it with go tool pprof); for performance reports")
	return cmd
}

// exitOnSecondSignal exits the process at once on a signal that arrives
// after ctx ended (the first signal started the drain), for a drain that
// hangs. It returns when done is closed.
func exitOnSecondSignal(ctx context.Context, done <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(c)
	select {
	case <-c:
		os.Exit(ExitHardStop)
	case <-done:
	}
}

func serve(ctx context.Context, cmd *cobra.Command, g *globals, cfg Config, once, lenient, monitorOnce, createIndex bool) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, !once)
	logs := monitor.NewLogRing(logger.Handler(), 50) // warnings for the monitor's events
	logger = slog.New(service.TraceLogs{Handler: logs})
	stopTracing, err := service.SetupTracing(ctx, logger, version)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	fallback.RouteRedisLogs(logger)
	sc, err := cfg.serviceConfig()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	sc.Once, sc.MonitorOnce, sc.Logger, sc.Logs, sc.Redactor = once, monitorOnce, logger, logs, g.red
	sc.Index.Create = createIndex
	res, err := service.Serve(ctx, sc)
	if once && res.Stats != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", res.Stats)
	}
	if err != nil || !once {
		return err
	}
	if res.Monitor != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", res.Monitor)
	}
	return onceOutcome(res.Stats, res.Drained, lenient)
}
