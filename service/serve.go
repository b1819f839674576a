// Package service composes ragsync's rooms into the running service: serve
// (the pipeline from the configured source to the index, the query front
// door, the monitor, the blue/green family follower, the periodic purge,
// the repayment of reuse debt, the start-up probe and the HTTP endpoints)
// and the index-wide operations built from the same parts (opening an
// index, its family's shadows, re-indexing). The command only turns its
// flags and configuration into a Config and prints what comes back.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// Config is everything serve runs with.
type Config struct {
	Index    IndexConfig
	Source   SourceConfig
	Pipeline PipelineConfig
	// FrontDoor, when not nil, is the query front door's configuration
	// (frontdoor.enabled).
	FrontDoor *fallback.Config
	Monitor   MonitorConfig
	// Purge and PurgeInterval are the periodic purge (0: every hour).
	Purge         sink.PurgeOptions
	PurgeInterval time.Duration
	// IndexPoll is how often the aliases and index states are read (0: 2s).
	IndexPoll time.Duration
	// HTTPListen is the address of /metrics, /healthz and /readyz; "" none.
	HTTPListen string
	// Freshness is the declared freshness target (the monitor's freshness
	// signal) and when /readyz answers degraded.
	Freshness FreshnessConfig
	// Once drains the source and stops (serve --once): no front door, no
	// HTTP server, no purge, family follower or repayment; the monitor
	// only with MonitorOnce.
	Once, MonitorOnce bool
	// Logger is where everything logs; Logs, when not nil, is the ring of
	// recent warnings the monitor's events carry (it must see the lines
	// Logger writes).
	Logger *slog.Logger
	Logs   *monitor.LogRing
	// Redactor masks secrets in everything serve sends out of the process
	// besides Logger's lines (which the caller routes through it): dead
	// letters, the front door's replies and dead letters, monitor events
	// and the /healthz and /readyz bodies. nil masks the password patterns
	// only.
	Redactor *redact.Redactor
}

// Result is what a serve run did.
type Result struct {
	// Stats are the pipeline's counters; nil when serve stopped before it
	// built the pipeline.
	Stats pipeline.Snapshot
	// Drained says the source ended (rather than serve being stopped).
	Drained bool
	// Monitor is the monitor's summary line with Once and MonitorOnce; ""
	// otherwise.
	Monitor string
}

// Serve runs serve until ctx ends, the source is drained (Once, or a
// finite source without a front door) or something fails.
func Serve(ctx context.Context, cfg Config) (Result, error) {
	logger, red := cfg.Logger, cfg.Redactor
	// Bind before consuming: a port in use must fail at once, not after
	// the source has been applied.
	var ln net.Listener
	if cfg.HTTPListen != "" && !cfg.Once {
		var err error
		if ln, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			return Result{}, fmt.Errorf("http.listen %s: %w (choose a free address or set http.listen to empty to disable)", cfg.HTTPListen, err)
		}
		defer ln.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Recorded on the index: a change of chunker settings since the last
	// start is logged (a warning naming both, the chunks cut with the
	// others and what re-cuts them), and ragsync_index_chunks shows the mix.
	cfg.Index.Chunker = cfg.Pipeline.fingerprint()
	ix, err := Open(ctx, cfg.Index, sink.Write, logger, reg)
	if err != nil {
		return Result{}, err
	}
	defer ix.Close()
	emb, st, pool := ix.Emb, ix.Store, ix.Pool
	if err := probeEmbedder(ctx, emb, logger); err != nil {
		return Result{}, err
	}
	warnUnvacuumed(ctx, st, logger)
	src, err := newSource(ctx, cfg.Source, cfg.Pipeline.Decoder, cfg.Once, pool, st, reg, logger)
	if err != nil {
		return Result{}, err
	}
	defer src.close()
	if cfg.Pipeline, err = cfg.servePipelineConfig(); err != nil {
		return Result{}, err
	}
	started := false // the pipeline runs
	if src.abandon != nil {
		// A later start-up step that fails (the monitor, the front door's
		// Redis) must not leave the slot this start created holding WAL.
		defer func() {
			if !started {
				src.abandon()
			}
		}()
	}
	if src.collector != nil {
		reg.MustRegister(src.collector)
	}
	// The monitor is built before the pipeline; its freshness signal reads
	// the pipeline's backlog once it exists.
	var pipe atomic.Pointer[pipeline.Pipeline]
	cfg.Monitor.FreshnessTarget = cfg.Freshness.Target
	cfg.Monitor.Backlog = func() monitor.Backlog {
		if p := pipe.Load(); p != nil {
			return monitorBacklog(p)
		}
		return monitor.Backlog{}
	}
	mon := &monitorWiring{}
	if cfg.Monitor.Enabled && (!cfg.Once || cfg.MonitorOnce) {
		if mon, err = newMonitor(ctx, cfg.Monitor, ix, src.lag, reg, cfg.Logs, red, logger, true); err != nil {
			return Result{}, err
		}
	}
	defer mon.Close()
	var fd *frontDoor
	var observer pipeline.Observer
	if cfg.FrontDoor != nil && !cfg.Once {
		fcfg := *cfg.FrontDoor
		fcfg.Redact = red.String
		if fd, err = newFrontDoor(ctx, fcfg, mon.tap(emb), st, reg, logger); err != nil {
			return Result{}, err
		}
		defer fd.Close()
		if ix.Name != cfg.Index.Index {
			// index: is an alias: answer from its target (see family).
			fd.fd.SetTarget(ix.Name, mon.tap(emb), st)
		}
		var n int
		err := migrations.RetryInterrupted(ctx, logger, "rebuilding the bloom filters", func() error {
			var err error
			n, err = rebuildBloom(ctx, fd.fd.Bloom(), st)
			return err
		})
		if err != nil {
			return Result{}, err
		}
		logger.Info("front door bloom filters rebuilt", "documents", n)
		observer = fd.fd.Changes()
	}
	pemb, stopEmb, err := PipelineEmbedder(cfg.Index.Embedder, emb, reg, nil)
	if err != nil {
		return Result{}, err
	}
	defer stopEmb()
	// Live changes and the repayment of reuse debt share the embedder;
	// the repayment only calls it while the pipeline's lane is idle.
	lanes := pipeline.NewLanes(pemb, 0)
	pred := pipeline.NewPredictor(0)
	target := ix.Target()
	target.Embedder = lanes.Live()
	p, err := NewPipeline(cfg.Pipeline, Stages{Source: src.src, DeadLetters: redactedDeadLetters{src.dlq, red},
		Target: target, Traces: mon.traces(), Observer: observer}, pred, reg, logger)
	if err != nil {
		return Result{}, err
	}
	pipe.Store(p)
	var repayer *pipeline.Repayer
	if !cfg.Pipeline.Pipeline.Reuse.Disabled && !cfg.Once {
		dc := cfg.Pipeline.Debt
		dc.Predictor = pred
		dc.Logger, dc.Registerer, dc.Yield, dc.Samples = logger.With("stage", "reuse_debt"), reg, lanes.Wait, st
		if repayer, err = pipeline.NewRepayer(dc, st, debtLane{lanes.Background()}); err != nil {
			return Result{}, err
		}
	}
	// Dual-write to the family's other indexes from the first batch on,
	// and follow alias moves (blue/green re-index).
	fam := newFamily(cfg.Index, cfg.IndexPoll, ix, p, fd, mon.tap, logger)
	var serving *sink.ServingHold
	err = migrations.RetryInterrupted(ctx, logger, "taking the serving lock", func() error {
		var err error
		serving, err = fam.cat.HoldServing(ctx, cfg.Index.Index, ix.Name)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	defer serving.Release()
	fam.serving = serving
	if err := migrations.RetryInterrupted(ctx, logger, "reading the index family", func() error { return fam.poll(ctx) }); err != nil {
		return Result{}, err
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
	if !cfg.Once {
		g.Go(func() error { purgePeriodically(runCtx, st, cfg.Purge, cfg.PurgeInterval, logger); return nil })
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
		gate := &freshnessGate{after: cfg.Freshness.DegradedAfter, backlog: p.Backlog, logger: logger.With("stage", "http")}
		g.Go(func() error { gate.watch(runCtx); return nil })
		handler := httpHandler(reg, pool.Ping, ready, gate.check, logger)
		if src.unhealthy != nil {
			handler = sourceReadyz(src.unhealthy, handler)
		}
		handler = redactedHealth(red, handler)
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
	err = g.Wait()
	res := Result{Stats: p.Stats(), Drained: drained.Load()}
	if res.Stats == nil {
		res.Stats = pipeline.Snapshot{} // nil says the pipeline never ran
	}
	if err == nil && cfg.Once && mon.m != nil {
		res.Monitor = monitorSummary(reg)
	}
	return res, err
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
// (Postgres reachable, the pipeline not failed, and its backlog not older
// than freshness.degraded_after: degraded returns what to say after
// "degraded: ", or ""). /readyz says what is wrong with Postgres without
// the connection details (postgresProblem) and logs the error itself once
// each time the problem changes.
func httpHandler(reg *prometheus.Registry, ping func(context.Context) error, ready func() bool, degraded func(context.Context) string, logger *slog.Logger) http.Handler {
	var lastProblem atomic.Pointer[string]
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ping(ctx); err != nil {
			problem := postgresProblem(err)
			if old := lastProblem.Swap(&problem); old == nil || *old != problem {
				logger.WarnContext(r.Context(), "readyz: the index's Postgres does not answer", "problem", problem, "error", err)
			}
			http.Error(w, "postgres: "+problem+"; see the logs", http.StatusServiceUnavailable)
			return
		}
		lastProblem.Store(nil)
		if !ready() {
			http.Error(w, "pipeline stopped, stalled behind a failing dependency, or over its dead-letter limit (pipeline.dead_letter_max_ratio); see the logs", http.StatusServiceUnavailable)
			return
		}
		if msg := degraded(r.Context()); msg != "" {
			http.Error(w, "degraded: "+msg, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// redactedHealth masks secrets in the bodies of /healthz and /readyz
// (a source's problem may quote a connection string); /metrics carries
// no error text (labels are fixed sets) and is served as it is.
func redactedHealth(red *redact.Redactor, next http.Handler) http.Handler {
	masked := redactedBody(red, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			masked.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sourceReadyz answers /readyz with the source's problem and its fix
// while it has one (the Postgres slot lost or gone, or its initial load
// not done yet); otherwise next answers.
func sourceReadyz(unhealthy func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if msg := unhealthy(); msg != "" {
				http.Error(w, fmt.Sprintf("source: %s", msg), http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
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

// probeText is what serve embeds once at start-up.
const probeText = "ragsync start-up probe"

// probeTimeout bounds the start-up probe, retries included: a provider
// that is down only delays serve by this much.
const probeTimeout = 30 * time.Second

// probeEmbedder embeds one short text at start-up, so that a model that
// answers with another size than embedder.dimensions, a bad key or an
// unknown model stops serve with the error naming the setting, before any
// document depends on it. A provider that is down or slow only warns: the
// pipeline waits for it like for any outage.
func probeEmbedder(ctx context.Context, emb embedder.Client, logger *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := emb.Embed(pctx, []string{probeText})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case Fatal(err):
		return fmt.Errorf("check the embedder at start-up: %w", err)
	}
	logger.WarnContext(ctx, "the embedder did not answer the start-up probe; starting anyway, the pipeline waits for it", "model", emb.Model(), "error", err)
	return nil
}

// debtLane sends the repayment of reuse debt to the provider budget in
// embedder.LaneDebt: the budget every process sharing the API key draws
// from admits it after live changes, of this process and of the others
// (pipeline.Lanes only orders it after this process's own).
type debtLane struct{ e pipeline.Embedder }

func (d debtLane) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return d.e.Embed(embedder.WithLane(ctx, embedder.LaneDebt), texts)
}

func (d debtLane) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	return d.e.EmbedCounted(embedder.WithLane(ctx, embedder.LaneDebt), texts, tokens)
}

// ReportedModel is the wrapped embedder's.
func (d debtLane) ReportedModel() string { return d.e.ReportedModel() }
