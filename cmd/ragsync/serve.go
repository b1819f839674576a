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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func newServeCmd(g *globals) *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the sync pipeline (and /metrics, /healthz, /readyz)",
		Long: `serve consumes change events from the configured source and keeps the index in
sync until it is stopped (SIGINT/SIGTERM; a second signal exits at once).
With --once and a file source it stops at the end of the file and prints a
summary of what it did.`,
		Example: `  ragsync serve --config ragsync.yaml
  ragsync serve --config ragsync.yaml --set source.kind=file --set source.file.path=events.jsonl --once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if err := cfg.validate(true); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				// A second signal exits hard, for a drain that hangs.
				<-ctx.Done()
				c := make(chan os.Signal, 1)
				signal.Notify(c, os.Interrupt, syscall.SIGTERM)
				<-c
				os.Exit(130)
			}()
			return serve(ctx, cmd, cfg, once)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "stop at the end of a file source and print a summary")
	return cmd
}

func serve(ctx context.Context, cmd *cobra.Command, cfg Config, once bool) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, !once)
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
	warnUnvacuumed(ctx, st, logger)
	src, dlq, closeSrc, err := newSource(cfg, once, logger)
	if err != nil {
		return err
	}
	defer closeSrc()
	if ks, ok := src.(*cdc.KafkaSource); ok {
		reg.MustRegister(cdc.NewLagCollector(ks))
	}
	var snk pipeline.Sink = st
	var fd *frontDoor
	if cfg.FrontDoor.Enabled && !once {
		if fd, err = newFrontDoor(ctx, cfg, emb, st, reg, logger); err != nil {
			return err
		}
		defer fd.Close()
		n, err := rebuildBloom(ctx, fd.fd.Bloom(), st)
		if err != nil {
			return err
		}
		logger.Info("front door bloom filters rebuilt", "documents", n)
		snk = bloomSink{Sink: st, bloom: fd.fd.Bloom()}
	}
	p, err := newPipeline(cfg, src, dlq, emb, snk, st, reg, logger)
	if err != nil {
		return err
	}

	var running atomic.Bool
	running.Store(true)
	ready := func() bool { return running.Load() && p.Healthy() }
	g, gctx := errgroup.WithContext(ctx)
	runCtx, cancelRun := context.WithCancel(gctx)
	defer cancelRun()
	g.Go(func() error {
		defer cancelRun() // the pipeline ending (--once) stops the HTTP server too
		err := p.Run(runCtx)
		if err != nil {
			running.Store(false)
		}
		return err
	})
	if !once {
		g.Go(func() error { purgePeriodically(runCtx, st, purgeOpts, cfg.Purge.Interval, logger); return nil })
	}
	if fd != nil {
		g.Go(func() error { return fd.fd.Run(runCtx) })
	}
	if cfg.HTTP.Listen != "" && !once {
		srv := &http.Server{Handler: httpHandler(reg, pool.Ping, ready), ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w (choose a free address or set http.listen to empty to disable)", cfg.HTTP.Listen, err)
		}
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
	err = g.Wait()
	if once {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n", p.Stats())
	}
	return err
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
		logger.Warn("autovacuum does not cover this table: replaced and deleted chunks will pile up as dead rows in it and its HNSW index",
			"table", t.Table, "fix", t.Fix)
	}
}
