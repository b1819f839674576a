package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func newServeCmd(g *globals) *cobra.Command {
	var once, lenient, monitorOnce bool
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
until it is stopped.`,
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
			if err := cfg.validate(true); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
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
			return serve(ctx, cmd, cfg, once, lenient, monitorOnce)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "drain the source (file to its end, Kafka to the offsets seen at start), print a summary and exit with a code saying how it ended")
	cmd.Flags().BoolVar(&lenient, "lenient", false, "with --once, exit 0 even with dead letters or when no change matched the configured tables")
	cmd.Flags().BoolVar(&monitorOnce, "monitor", false, "with --once, run the monitor during the drain too (unless monitor.enabled is false)")
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

func serve(ctx context.Context, cmd *cobra.Command, cfg Config, once, lenient, monitorOnce bool) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, !once)
	logs := monitor.NewLogRing(logger.Handler(), 50) // warnings for the monitor's events
	logger = slog.New(traceLogs{logs})
	stopTracing, err := setupTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	routeRedisLogs(logger)
	// Bind before consuming: a port in use must fail at once, not after
	// the source has been applied.
	var ln net.Listener
	if cfg.HTTP.Listen != "" && !once {
		var err error
		if ln, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return fmt.Errorf("http.listen %s: %w (choose a free address or set http.listen to empty to disable)", cfg.HTTP.Listen, err)
		}
		defer ln.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	purgeOpts, err := cfg.Purge.options()
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	ix, err := openIndex(ctx, cfg, logger, reg)
	if err != nil {
		return err
	}
	defer ix.Close()
	emb, st, pool := ix.emb, ix.st, ix.pool
	if err := probeEmbedder(ctx, emb, logger); err != nil {
		return err
	}
	warnUnvacuumed(ctx, st, logger)
	var (
		src      pipeline.Source
		dlq      pipeline.DeadLetters
		closeSrc func()
		pgSrc    *pgrepl.Source
	)
	if cfg.Source.Kind == "postgres" {
		pgSrc, dlq, err = newPostgresSource(ctx, cfg, once, pool, st, reg, logger)
		src, closeSrc = pgSrc, func() {}
		if pgSrc != nil {
			closeSrc = pgSrc.Close
		}
	} else {
		src, dlq, closeSrc, err = newSource(cfg, once, logger)
	}
	if err != nil {
		return err
	}
	defer closeSrc()
	started := false // the pipeline runs
	if pgSrc != nil {
		// A later start-up step that fails (the monitor, the front door's
		// Redis) must not leave the slot this start created holding WAL.
		defer func() {
			if !started {
				pgSrc.Abandon()
			}
		}()
	}
	if ks, ok := src.(*kafka.Source); ok {
		reg.MustRegister(kafka.NewLagCollector(ks))
	}
	mon, err := startMonitor(ctx, cfg, ix, src, reg, logs, logger, once && !monitorOnce)
	if err != nil {
		return err
	}
	defer mon.Close()
	var snk pipeline.Sink = st
	var fd *frontDoor
	if cfg.FrontDoor.Enabled && !once {
		if fd, err = newFrontDoor(ctx, cfg, mon.tap(emb), st, reg, logger); err != nil {
			return err
		}
		defer fd.Close()
		if ix.name != cfg.Index {
			// index: is an alias: answer from its target (see family).
			fd.fd.SetTarget(ix.name, mon.tap(emb), st)
		}
		var n int
		err := migrations.RetryInterrupted(ctx, logger, "rebuilding the bloom filters", func() error {
			var err error
			n, err = rebuildBloom(ctx, fd.fd.Bloom(), st)
			return err
		})
		if err != nil {
			return err
		}
		logger.Info("front door bloom filters rebuilt", "documents", n)
		snk = frontDoorSink{Sink: st, changes: fd.fd.Changes()}
	}
	pemb, stopEmb, err := pipelineEmbedder(cfg, emb, reg, nil)
	if err != nil {
		return err
	}
	defer stopEmb()
	// Live changes and the repayment of reuse debt share the embedder;
	// the repayment only calls it while the pipeline's lane is idle.
	lanes := pipeline.NewLanes(pemb, 0)
	pred := pipeline.NewPredictor(0)
	p, err := newPipeline(cfg, src, dlq, lanes.Live(), snk, st, nil, mon.traces(), pred, reg, logger)
	if err != nil {
		return err
	}
	var repayer *pipeline.Repayer
	if !cfg.Reuse.pipeline(cfg.Monitor, nil).Disabled && !once {
		dc := cfg.Reuse.debt(pred)
		dc.Logger, dc.Registerer, dc.Yield, dc.Samples = logger.With("stage", "reuse_debt"), reg, lanes.Wait, st
		if repayer, err = pipeline.NewRepayer(dc, st, lanes.Background()); err != nil {
			return err
		}
	}
	// Dual-write to the family's other indexes from the first batch on,
	// and follow alias moves (blue/green re-index).
	fam := newFamily(cfg, ix, p, fd, mon.tap, logger)
	var serving *sink.ServingHold
	err = migrations.RetryInterrupted(ctx, logger, "taking the serving lock", func() error {
		var err error
		serving, err = fam.cat.HoldServing(ctx, cfg.Index, ix.name)
		return err
	})
	if err != nil {
		return err
	}
	defer serving.Release()
	fam.serving = serving
	if err := migrations.RetryInterrupted(ctx, logger, "reading the index family", func() error { return fam.poll(ctx) }); err != nil {
		return err
	}

	started = true
	var running atomic.Bool
	running.Store(true)
	ready := func() bool { return running.Load() && p.Healthy() }
	g, gctx := errgroup.WithContext(ctx)
	runCtx, cancelRun := context.WithCancel(gctx)
	defer cancelRun()
	var drained atomic.Bool
	g.Go(func() error {
		err := p.Run(runCtx)
		if err != nil {
			running.Store(false)
			cancelRun()
			return err
		}
		// Run returns nil both at the end of the source and when stopped;
		// only the first is a drain.
		drained.Store(runCtx.Err() == nil)
		if fd != nil && drained.Load() {
			// A finite source (a file without follow) ended; the front door
			// keeps answering until serve is stopped.
			logger.Info("source drained; the front door keeps serving until serve is stopped")
			<-runCtx.Done()
			return nil
		}
		cancelRun() // the pipeline ending (--once) stops the HTTP server too
		return nil
	})
	if !once {
		g.Go(func() error { purgePeriodically(runCtx, st, purgeOpts, cfg.Purge.Interval, logger); return nil })
		g.Go(func() error { return fam.run(runCtx) })
		if repayer != nil {
			g.Go(func() error { return repayer.Run(runCtx) })
		}
	}
	if fd != nil {
		g.Go(func() error { return fd.fd.Run(runCtx) })
	}
	g.Go(func() error { return mon.run(runCtx) })
	if ln != nil {
		handler := httpHandler(reg, pool.Ping, ready)
		if pgSrc != nil {
			handler = slotReadyz(pgSrc, handler)
		}
		// net/http's own messages (a failed accept, a bad request) go to
		// the redacting logger, not to the log package's default one.
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.With("stage", "http").Handler(), slog.LevelWarn)}
		logger.Info("http listening", "addr", ln.Addr().String())
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-runCtx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	if err := g.Wait(); err != nil {
		if once {
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", p.Stats())
		}
		return err
	}
	if !once {
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n", p.Stats())
	if mon.m != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", monitorSummary(reg))
	}
	return onceOutcome(p.Stats(), drained.Load(), lenient)
}

// purgePeriodically removes soft-deleted documents and unused cache entries
// past their retention every interval (purge.interval, default 1h). A failed
// purge is logged and tried again next time: it never stops the pipeline.
func purgePeriodically(ctx context.Context, st *sink.Store, opts sink.PurgeOptions, every time.Duration, logger *slog.Logger) {
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := st.Purge(ctx, opts)
		if err != nil {
			if ctx.Err() == nil {
				logger.Warn("purge failed; will retry at the next interval", "error", err)
			}
			continue
		}
		if res.Documents > 0 || res.CacheEntries > 0 {
			logger.Info("purged", "documents", res.Documents, "chunks", res.Chunks, "cache_entries", res.CacheEntries)
		}
	}
}

// httpHandler serves /metrics, /healthz (process alive) and /readyz
// (Postgres reachable and the pipeline not failed).
func httpHandler(reg *prometheus.Registry, ping func(context.Context) error, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ping(ctx); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !ready() {
			http.Error(w, "pipeline stopped, stalled behind a failing dependency, or over its dead-letter limit (pipeline.dead_letter_max_ratio); see the logs", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// warnUnvacuumed logs each of ragsync's tables autovacuum skips. Without it
// every edit's replaced chunks stay as dead tuples in the table and the HNSW
// index, which grow without bound, and plans go by stale statistics.
func warnUnvacuumed(ctx context.Context, st *sink.Store, logger *slog.Logger) {
	tables, err := st.Unvacuumed(ctx)
	if err != nil {
		logger.Warn("could not check autovacuum", "error", err)
		return
	}
	for _, t := range tables {
		msg := "autovacuum does not cover this table: replaced and deleted rows will pile up in it as dead rows"
		if t.HNSW {
			msg = "autovacuum does not cover this table: replaced and deleted chunks will pile up as dead rows in it and its HNSW index"
		}
		logger.Warn(msg, "table", t.Table, "fix", t.Fix)
	}
}
