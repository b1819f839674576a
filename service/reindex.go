package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// ReindexConfig is a blue/green re-index: Target.Index is built, with
// Target's embedder (model and dimensions), from the documents stored in
// the live index of Family (the configured index:, an alias or an index).
type ReindexConfig struct {
	Target   IndexConfig
	Family   string
	Pipeline PipelineConfig
	// PageRows is how many documents one page of the reading holds.
	PageRows int
	// Bulk loads an empty target with COPY and builds its HNSW index at
	// the end (--bulk auto); false always upserts.
	Bulk bool
	// WaitServe bounds the wait for a running serve to dual-write the
	// target after the first pass.
	WaitServe time.Duration
	// Force takes over a target of another family or of none.
	Force bool
	// Resume is the command that resumes this reindex, for the batch lane's
	// log when it is interrupted.
	Resume string
	Logger *slog.Logger
	// Report, when not nil, hears of each step as it ends, to print it.
	Report func(ReindexStep)
	// BatchProgress, when not nil, hears where the batch lane stands
	// whenever a batch is recorded or ends.
	BatchProgress func(BatchProgress)
}

// The steps a re-index reports.
const (
	StepStarted   = "started"    // From, Model, Dimensions, Type: the first pass begins
	StepBatchLane = "batch lane" // Batch, Took (Err when it failed): the batch lane ended
	StepFirstPass = "first pass" // From, Model, Dimensions, Type, Documents, Took, Stats (Err when it failed)
	StepNoServe   = "no serve"   // no serve of the family runs: nothing to wait for
	StepDualWrite = "dual-write" // Since: a running serve writes the target too
	StepCatchUp   = "catch-up"   // Documents, Took, Stats (Err when it failed)
	StepCaughtUp  = "caught up"  // the target is complete and followed
)

// ReindexStep is one step of a re-index: the start, then each finished
// step.
type ReindexStep struct {
	Step       string
	From       string
	Model      string
	Dimensions int
	// Type is the target's vector type.
	Type      sink.VectorType
	Documents int64
	Took      time.Duration
	Stats     pipeline.Snapshot
	Since     time.Time
	// Batch is what the batch lane did (StepBatchLane).
	Batch BatchResult
	Err   error
}

// Reindex builds the target from the family's live index: a first pass
// over every stored document (each keeps its version, deleted ones their
// tombstone, so a rerun only applies what changed), then, once a running
// serve writes every change to the target too, a second pass for what
// changed meanwhile, fenced by version; the target is then caught up and
// ragsync index promote can switch to it. An index of another family is
// refused before anything is written unless Force.
func Reindex(ctx context.Context, cfg ReindexConfig) error {
	report := cfg.Report
	if report == nil {
		report = func(ReindexStep) {}
	}
	logger, family, to := cfg.Logger, cfg.Family, cfg.Target.Index
	// A reindex draws the provider budget after serve's live changes.
	cfg.Target.Embedder.Lane = embedder.LaneBackfill
	if err := cfg.Target.Embedder.Validate(); err != nil {
		return fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.Target.URL, cfg.Target.Schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Migrated once, for the catalog and the index alike.
	if err := migrations.Up(ctx, pool, cfg.Target.Schema, logger); err != nil {
		return err
	}
	cat := sink.NewCatalog(pool, cfg.Target.Schema)
	// An existing target is checked before opening it, which could
	// change its full-text setting; a new one is claimed once registered.
	if err := cat.Claim(ctx, to, family, cfg.Force); err != nil && !errors.Is(err, sink.ErrNoIndex) {
		return err
	}
	r, found, err := cat.Resolve(ctx, family)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("index: %q does not exist in schema %s; nothing to reindex from (ragsync index list shows what does)", family, cfg.Target.Schema)
	}
	from := r.Index.Name
	if from == to {
		return fmt.Errorf("--to: %q is the live index of %s itself; name a new index", to, family)
	}
	// --to names the index to build: a new name beside the family's
	// indexes is the point, not a typo (a typo of an existing index is
	// the claim's refusal above). An empty target is bulk-loaded by the
	// first pass (--bulk auto), which then builds its HNSW index.
	target := cfg.Target
	target.Create = true
	target.Chunker = cfg.Pipeline.fingerprint()
	mode := sink.Write
	if cfg.Bulk {
		mode = sink.Bulk
	}
	ix, err := openOn(ctx, pool, target, mode, logger, nil)
	if err != nil {
		return err
	}
	defer finishBulk(ctx, ix, logger)
	// Before a document is written: the target joins this family or the
	// run stops here.
	if err := cat.Claim(ctx, to, family, cfg.Force); err != nil {
		return err
	}
	vt := ix.Store.Identity().Type
	report(ReindexStep{Step: StepStarted, From: from, Model: ix.Emb.Model(), Dimensions: ix.Emb.Dimensions(), Type: vt})
	start := time.Now()
	if cfg.Target.Embedder.Batch.Enabled {
		// The batch lane (embedder.batch): the texts the first pass would
		// embed go through the provider's Batch API, and the pass finds
		// their vectors cached.
		collect := func(ctx context.Context, t pipeline.Target) error {
			src := backfill.NewIndexSource(sink.NewCatalog(ix.Pool, ix.Schema), from, cfg.PageRows)
			p, err := NewPipeline(cfg.Pipeline, Stages{Source: src, Target: t}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			return p.Run(ctx)
		}
		res, err := batchLane(ctx, cfg.Target.Embedder, ix, collect, cfg.Resume, logger, cfg.BatchProgress)
		report(ReindexStep{Step: StepBatchLane, Batch: res, Took: res.Took, Err: err})
		if err != nil {
			return fmt.Errorf("reindex stopped in the batch lane: %w", err)
		}
	}
	n, stats, err := reindexPass(ctx, cfg, ix, from)
	report(ReindexStep{Step: StepFirstPass, From: from, Model: ix.Emb.Model(), Dimensions: ix.Emb.Dimensions(), Type: vt, Documents: n,
		Took: time.Since(start), Stats: stats, Err: err})
	if err != nil {
		return fmt.Errorf("reindex stopped: %w (fix the cause and run it again: done documents are no-ops)", err)
	}
	// Catch up without a gap (docs/reindex.md): from here a running serve
	// writes every change to the new index too; once it does, a second
	// pass reads every change committed before, fenced by version.
	if err := cat.Follow(ctx, to, family, sink.StateBuilding); err != nil {
		return err
	}
	running, err := cat.ServeRunning(ctx, family)
	if err != nil {
		return err
	}
	if !running {
		// No change arrives without a serve; one started later
		// dual-writes from its first batch.
		report(ReindexStep{Step: StepNoServe})
	} else {
		switch since, err := cat.WaitDualWrite(ctx, to, cfg.WaitServe); {
		case err != nil:
			return err
		case since == nil:
			return fmt.Errorf("a serve of %s is running but did not start writing %s within %s (--wait-serve): is it an older ragsync, or failing to open the index (see its log)? Run reindex again once it does", family, to, cfg.WaitServe)
		default:
			report(ReindexStep{Step: StepDualWrite, Since: *since})
		}
	}
	start = time.Now()
	n, stats, err = reindexPass(ctx, cfg, ix, from)
	report(ReindexStep{Step: StepCatchUp, Documents: n, Took: time.Since(start), Stats: stats, Err: err})
	if err != nil {
		return fmt.Errorf("reindex catch-up stopped: %w (run it again: done documents are no-ops)", err)
	}
	if err := cat.Follow(ctx, to, family, sink.StateCaughtUp); err != nil {
		return err
	}
	report(ReindexStep{Step: StepCaughtUp})
	return nil
}

// reindexPass applies every document of index from to ix once. A target
// opened for a bulk load is loaded with COPY and its HNSW index built at
// the end of the pass; the next pass writes document by document.
func reindexPass(ctx context.Context, cfg ReindexConfig, ix *Index, from string) (int64, pipeline.Snapshot, error) {
	logger := cfg.Logger
	src := backfill.NewIndexSource(sink.NewCatalog(ix.Pool, ix.Schema), from, cfg.PageRows)
	if ix.Store.Mode() == sink.Bulk {
		logger.Info("target index is empty: bulk load, HNSW index built at the end", "index", cfg.Target.Index)
		defer finishBulk(ctx, ix, logger)
	}
	// Documents share embedding requests, as serve's changes do, and every
	// answer is cached as it arrives, so a killed reindex pays again for
	// at most the requests in flight.
	emb, stopEmb, err := PipelineEmbedder(cfg.Target.Embedder, ix.Emb, nil, ix.Store.CacheTexts)
	if err != nil {
		return 0, nil, err
	}
	defer stopEmb()
	// Built like serve's pipeline, so every pipeline.* setting holds here
	// too: a document serve indexed is never refused by its re-index.
	// The pipeline flushes a bulk load's buffer before it acknowledges any
	// page (Index.Flush).
	target := ix.Target()
	target.Embedder = emb
	p, err := NewPipeline(cfg.Pipeline, Stages{Source: src, Target: target}, nil, prometheus.NewRegistry(), logger)
	if err != nil {
		return 0, nil, err
	}
	err = p.Run(ctx)
	return src.Read(), p.Stats(), err
}
