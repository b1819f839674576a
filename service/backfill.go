package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// BackfillConfig is a backfill: rows of the document database's tables
// read as changes, through the pipeline, into the configured index and the
// indexes that follow it.
type BackfillConfig struct {
	Index    IndexConfig
	Source   backfill.Config
	Pipeline PipelineConfig
	// DryRun reads and counts without embedding or writing anything, and
	// opens the index read-only: no schema, index or checkpoint is made.
	DryRun bool
	// Bulk loads an empty index with COPY and builds its HNSW index at the
	// end, when no other index follows it.
	Bulk bool
	// Reconcile deletes, after a table is read whole in one snapshot, its
	// documents whose rows are gone (backfill.Config.Reconcile); a dry run
	// only counts them.
	Reconcile bool
	Logger    *slog.Logger
	// PipelineLogger, when not nil, is the pipeline's own logger (a dry
	// run's says only what is wrong: its summary would count what it only
	// pretends to apply).
	PipelineLogger *slog.Logger
	// Progress, when not nil, runs while the rows are applied and must
	// return once done is closed (the command's bar or log lines).
	Progress func(src *backfill.Source, p *pipeline.Pipeline, done <-chan struct{})
	// BatchProgress, when not nil, hears where the batch lane
	// (Index.Embedder.Batch) stands whenever a batch is recorded or ends.
	BatchProgress func(BatchProgress)
	// Resume is the command that resumes this backfill, for the batch
	// lane's log when it is interrupted.
	Resume string
}

// BackfillResult is what a backfill did; Err is why its run stopped, if
// it did.
type BackfillResult struct {
	Read  backfill.Progress
	Took  time.Duration
	Stats pipeline.Snapshot
	// Bulk says the index was bulk-loaded; Build is its HNSW build's time
	// (included in Took) and BuildErr its failure.
	Bulk     bool
	Build    time.Duration
	BuildErr error
	// Estimate is a dry run's count of what a real run would embed.
	Estimate *backfill.Estimate
	// Unserved says no serve of the index held its serving lock both when
	// the backfill started and when it ended (not for a dry run): the rows
	// changed after the snapshot are fenced out of the backfill, and
	// nothing is applying them.
	Unserved bool
	// Repaid is the repayment of the reuse debt this run left (near-
	// duplicate chunks on borrowed vectors), done before it returned;
	// Repaid.Outstanding is what reuse.repay_max_tokens_per_hour left.
	Repaid pipeline.RepayResult
	// Batch is what the batch lane did, when it ran.
	Batch *BatchResult
	Err   error
}

// dryEmbedder counts instead of embedding, with the real client's identity.
type dryEmbedder struct {
	*backfill.DryRun
	id embedder.Client
}

func (d dryEmbedder) Model() string         { return d.id.Model() }
func (d dryEmbedder) Dimensions() int       { return d.id.Dimensions() }
func (d dryEmbedder) ReportedModel() string { return d.id.ReportedModel() }

// Backfill runs a backfill. The error is one that stopped it before it
// read anything; the result's Err one that stopped its run.
func Backfill(ctx context.Context, cfg BackfillConfig) (*BackfillResult, error) {
	logger := cfg.Logger
	bc := cfg.Source
	bc.Logger = logger
	// A dry run only reads: it creates no schema, index or checkpoint.
	// An empty index opened for a bulk load takes the rows with COPY and
	// builds its HNSW index at the end.
	mode := sink.Write
	if cfg.Bulk {
		mode = sink.Bulk
	}
	// The index and the shadows record the settings the rows are cut with.
	cfg.Index.Chunker = cfg.Pipeline.fingerprint()
	// A backfill draws the provider budget after serve's live changes.
	cfg.Index.Embedder.Lane = embedder.LaneBackfill
	open := func() (*Index, error) { return Open(ctx, cfg.Index, mode, logger, nil) }
	if cfg.DryRun {
		open = func() (*Index, error) { return openDryRun(ctx, cfg.Index, logger) }
	}
	ix, err := open()
	if err != nil {
		return nil, err
	}
	defer ix.Close()
	// A bulk load that stops before its end still builds the HNSW index
	// it dropped, so the index stays searchable.
	defer finishBulk(ctx, ix, logger)
	// fresh: the index does not exist yet (a dry run's first backfill);
	// there is no store to read, and nothing to reconcile.
	fresh := ix.Store == nil
	if !cfg.DryRun {
		// As serve does, and before a row is read: a bad key, an unknown
		// model or another vector size fails at once with the setting to
		// fix, instead of after reading the whole table for nothing.
		if err := probeEmbedder(ctx, ix.Emb, logger); err != nil {
			return nil, err
		}
	}
	servedAtStart := !cfg.DryRun && serveRunning(ctx, cfg.Index.Index, ix, logger)
	var cp backfill.Checkpoints // nil: a dry run keeps none
	if !cfg.DryRun {
		cp = sink.NewCheckpoints(ix.Pool, ix.Schema, ix.Name)
	}
	if cfg.Reconcile && !fresh {
		// A dry run's deletes go to the dry run's sink, which writes
		// nothing, like its upserts.
		bc.Reconcile = ix.Store
	}
	var batchRes *BatchResult
	if !cfg.DryRun && cfg.Index.Embedder.Batch.Enabled {
		// The batch lane (embedder.batch): the rows are read once more
		// before the run, without checkpoints or reconcile, to list what
		// the run would embed into this index (its shadows embed online);
		// the run then finds those vectors cached. It runs before the run's
		// source opens: the batches may take hours, and no snapshot is held
		// open meanwhile.
		collect := func(ctx context.Context, t pipeline.Target) error {
			pre := bc
			pre.Reconcile, pre.Resume, pre.Logger = nil, false, slog.New(slog.DiscardHandler)
			psrc, err := backfill.Open(ctx, pre, nil)
			if err != nil {
				return err
			}
			defer psrc.Close()
			pp, err := NewPipeline(cfg.Pipeline, Stages{Source: psrc, Target: t}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			return pp.Run(ctx)
		}
		r, err := batchLane(ctx, cfg.Index.Embedder, ix, collect, cfg.Resume, logger, cfg.BatchProgress)
		if err != nil {
			return nil, fmt.Errorf("backfill stopped in the batch lane: %w", err)
		}
		batchRes = &r
	}
	src, err := backfill.Open(ctx, bc, cp)
	if err != nil {
		return nil, err
	}
	defer src.Close()

	// The pipeline writes the opened index (a bulk load flushes its
	// buffer before any checkpoint is saved: Index.Flush); a dry run
	// counts instead.
	target := ix.Target()
	var dry *backfill.DryRun
	if cfg.DryRun {
		if fresh {
			dry = backfill.NewDryRun(nil, ix.Emb.Dimensions())
		} else {
			dry = backfill.NewDryRun(ix.Store, ix.Emb.Dimensions())
		}
		target.Index, target.Embedder = dry, dryEmbedder{DryRun: dry, id: ix.Emb}
	}
	var shadows []pipeline.Target
	if !cfg.DryRun {
		if shadows, err = FamilyShadows(ctx, cfg.Index, ix, logger); err != nil {
			return nil, err
		}
	}
	// The bulk path writes one index; with indexes following this one,
	// every row goes through the pipeline to all of them. The index is
	// empty, so ending its bulk load at once builds an empty HNSW index.
	if len(shadows) > 0 {
		finishBulk(ctx, ix, logger)
	}
	bulk := !cfg.DryRun && ix.Store.Mode() == sink.Bulk
	if bulk {
		logger.Info("index is empty: bulk load, HNSW index built at the end")
	}
	// No dead-letter destination: a row that cannot be applied stops the
	// backfill with the reason, and --resume retries from its page.
	// Every answered request's vectors are cached as they arrive (except
	// for the dry run, which writes nothing), before the request's slot is
	// freed, so a kill loses at most the requests in flight, however many
	// documents wait for the index (a page of rows outruns the index
	// writes when the provider is fast); the resumed run and the bulk load
	// take them from the cache.
	if !cfg.DryRun {
		// Rows share embedding requests across documents, as serve's
		// changes do.
		co, stop, err := PipelineEmbedder(cfg.Index.Embedder, ix.Emb, nil, ix.Store.CacheTexts)
		if err != nil {
			return nil, err
		}
		defer stop()
		target.Embedder = co
	}
	// Read ahead at most about one page beyond the page being applied:
	// what a kill loses is what was read and not yet checkpointed, and a
	// page of rows already gives the coalescer plenty to share.
	pc := cfg.Pipeline
	if pc.Pipeline.MaxInFlightDocuments == 0 {
		pc.Pipeline.MaxInFlightDocuments = src.PageRows()
	}
	plog := logger
	if cfg.PipelineLogger != nil {
		plog = cfg.PipelineLogger
	}
	// Backfilled rows reach the family's other indexes too, as serve's
	// changes do (blue/green re-index).
	p, err := NewPipeline(pc, Stages{Source: src, Target: target, Shadows: shadows}, nil, prometheus.NewRegistry(), plog)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress != nil {
			cfg.Progress(src, p, done)
		}
	}()
	res := &BackfillResult{Err: p.Run(ctx), Bulk: bulk, Batch: batchRes}
	close(done)
	<-progressDone
	// The HNSW build is part of the run (its time is in the summary); it
	// runs after an interruption too, so the index is searchable.
	if bulk {
		bstart := time.Now()
		res.BuildErr = finishBulk(ctx, ix, logger)
		res.Build = time.Since(bstart)
	}
	if !cfg.DryRun && res.Err == nil && ctx.Err() == nil {
		// Serve repays reuse debt in the background; a backfill may run
		// with no serve at all, so it repays its own before it ends.
		if res.Repaid, err = repayAll(ctx, cfg.Pipeline, ix.Store, target.Embedder, logger); err != nil {
			res.Err = err
		}
		res.Unserved = !servedAtStart || !serveRunning(ctx, cfg.Index.Index, ix, logger)
	}
	res.Read, res.Stats, res.Took = src.Progress(), p.Stats(), time.Since(start)
	if dry != nil {
		e := dry.Estimate()
		res.Estimate = &e
	}
	return res, nil
}

// finishBulk ends ix's bulk load, if it is in one (sink.Store.Finish):
// what is buffered is written and the HNSW index built, even after ctx
// ended. A failed build is logged and returned.
func finishBulk(ctx context.Context, ix *Index, logger *slog.Logger) error {
	if ix.Store == nil || ix.Store.Mode() != sink.Bulk {
		return nil
	}
	err := ix.Store.Finish(context.WithoutCancel(ctx), sink.BuildOptions{})
	if err != nil {
		logger.Error("finishing the bulk load failed (writing its last rows or building the HNSW index); serve builds a missing HNSW index at start", "error", err)
	}
	return err
}

// openDryRun opens the configured index for a dry run, reading only. When
// the real run would create the index (no schema yet, or a schema without
// indexes, or --create-index beside others), the dry run prices that first
// backfill against an empty index: the result has the configured embedder
// and no store or pool, and nothing is created.
func openDryRun(ctx context.Context, cfg IndexConfig, logger *slog.Logger) (*Index, error) {
	ix, err := Open(ctx, cfg, sink.Read, logger, nil)
	if err == nil {
		return ix, nil
	}
	if err := mayCreateAfter(err, cfg.Create); err != nil {
		return nil, err
	}
	emb, err := embedder.New(cfg.Embedder)
	if err != nil {
		return nil, err
	}
	logger.Info("index does not exist yet: the dry run prices a first backfill into an empty index", "index", cfg.Index, "schema", cfg.Schema)
	return &Index{Emb: emb, Schema: cfg.Schema, Name: cfg.Index}, nil
}

// serveRunning says whether a serve of the configured index (family) runs:
// it holds the serving lock (sink.Catalog.HoldServing), a shared advisory
// lock on a connection of its own. Postgres drops the lock with that
// connection, so a serve that crashed stops counting at once (a heartbeat
// row would need a timeout); it is taken for every kind of source, where
// an active replication slot only tells of a Postgres source and not which
// index it writes, and an application_name is only a label a config may
// share or change. A failed check is logged and counts as no serve.
func serveRunning(ctx context.Context, family string, ix *Index, logger *slog.Logger) bool {
	running, err := sink.NewCatalog(ix.Pool, ix.Schema).ServeRunning(ctx, family)
	if err != nil {
		logger.WarnContext(ctx, "could not tell whether a serve of the index is running", "error", err)
	}
	return running
}

// repayAll repays the reuse debt of st, embedding with emb, unless reuse
// is off.
func repayAll(ctx context.Context, pc PipelineConfig, st *sink.Store, emb pipeline.Embedder, logger *slog.Logger) (pipeline.RepayResult, error) {
	if pc.Pipeline.Reuse.Disabled {
		return pipeline.RepayResult{}, nil
	}
	dc := pc.Debt
	dc.Logger = logger.With("stage", "reuse_debt")
	r, err := pipeline.NewRepayer(dc, st, emb)
	if err != nil {
		return pipeline.RepayResult{}, err
	}
	return r.RepayAll(ctx)
}
