package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

func newReindexCmd(g *globals) *cobra.Command {
	var to, model string
	var dims, pageRows int
	var bulkMode string
	var waitServe time.Duration
	var force bool
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Build another index (model, dimensions) from the documents the current one stores",
		Long: `reindex builds index --to from the documents stored in the configured index
(index:), with --model and --dimensions: it needs no access to the document
database. Every document keeps its version, deleted ones their tombstone, so
running reindex again later only applies what changed in between; an empty
target is loaded with COPY and its HNSW index built at the end. The embedding
cache serves chunks already embedded with the same model and dimensions.

After the first pass the new index follows the configured one: a running
serve writes every change to both (within index_poll); reindex waits for
that (--wait-serve), runs a second pass for what changed meanwhile and marks
the index caught-up. Then ragsync index promote NEW switches index: (an
alias) to it atomically and ragsync index rollback switches back;
ragsync index list shows the states, ragsync index drop removes the old one.

--to must name a new index, an empty one, or one this family's reindex
already claimed (a rerun continues it). An index of another family, or one
holding documents that reindex did not build from index:, is refused before
anything is written: writing into it would merge two indexes and serve
foreign documents to its users. --force takes it over anyway (the rare real
case: adopting an index built by hand with ragsync backfill); the live index
of another alias is refused even then.`,
		Example: `  ragsync reindex --config ragsync.yaml --to articles_v2 --model text-embedding-3-large --dimensions 1024`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			from := cfg.Index
			var errs []error
			if !indexName.MatchString(to) {
				errs = append(errs, fmt.Errorf("--to: %q must be lower-case letters, digits and _ starting with a letter (at most 41 characters)", to))
			} else if to == from {
				errs = append(errs, fmt.Errorf("--to: %q is the configured index itself; name a new index", to))
			}
			target := cfg
			target.Index = to
			if model != "" {
				target.Embedder.Model = model
				if target.Embedder.Provider == embedder.ProviderHashing && model != embedder.HashingModel {
					// The offline embedder would build a hashing index
					// under any name; the user asked for another model.
					errs = append(errs, fmt.Errorf("--model: provider hashing cannot embed with %q, its only model is %q; set embedder.provider: openai (with embedder.base_url and embedder.api_key) to build an index of %s",
						model, embedder.HashingModel, model))
				}
			}
			if cmd.Flags().Changed("dimensions") {
				target.Embedder.Dimensions = dims
			}
			if err := errors.Join(append(errs, target.validate(false))...); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return reindex(ctx, cmd, from, target, pageRows, bulkMode, waitServe, force)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "name of the index to build (required)")
	cmd.Flags().StringVar(&model, "model", "", "embedding model of the new index (default embedder.model)")
	cmd.Flags().IntVar(&dims, "dimensions", 0, "output dimensions of the new index (default embedder.dimensions)")
	cmd.Flags().IntVar(&pageRows, "page-rows", 500, "documents per batch")
	cmd.Flags().StringVar(&bulkMode, "bulk", "auto", "auto: COPY into an empty target and build its HNSW index at the end; off: always upsert")
	cmd.Flags().DurationVar(&waitServe, "wait-serve", time.Minute, "after the first pass, how long to wait for a running serve to start writing every change to the new index too")
	cmd.Flags().BoolVar(&force, "force", false, "write into --to even when it holds documents of another family or of none (never another alias's live index)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func reindex(ctx context.Context, cmd *cobra.Command, family string, cfg Config, pageRows int, bulkMode string, waitServe time.Duration, force bool) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, false).With("command", "reindex")
	// An existing target is checked before opening it, which could
	// change its full-text setting; a new one is claimed once registered.
	pool, cat, err := openCatalog(cmd, cfg)
	if err != nil {
		return err
	}
	err = cat.Claim(ctx, cfg.Index, family, force)
	pool.Close()
	if err != nil && !errors.Is(err, sink.ErrNoIndex) {
		return err
	}
	ix, err := openIndex(ctx, cfg, logger, nil)
	if err != nil {
		return err
	}
	defer ix.Close()
	cat = sink.NewCatalog(ix.Pool, cfg.Postgres.Schema)
	r, found, err := cat.Resolve(ctx, family)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("index: %q does not exist in schema %s; nothing to reindex from (ragsync index list shows what does)", family, cfg.Postgres.Schema)
	}
	from := r.Index.Name
	if from == cfg.Index {
		return fmt.Errorf("--to: %q is the live index of %s itself; name a new index", cfg.Index, family)
	}
	// Before a document is written: the target joins this family or the
	// run stops here.
	if err := cat.Claim(ctx, cfg.Index, family, force); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	start := time.Now()
	src, stats, err := reindexPass(ctx, ix, from, cfg, pageRows, bulkMode, logger)
	fmt.Fprintf(out, "reindex %s -> %s (%s, %d dimensions): %d documents in %s\npipeline: %s\n",
		from, cfg.Index, ix.Emb.Model(), ix.Emb.Dimensions(), src, time.Since(start).Round(time.Millisecond), stats)
	if err != nil {
		return fmt.Errorf("reindex stopped: %w (fix the cause and run it again: done documents are no-ops)", err)
	}
	// Catch up without a gap (docs/reindex.md): from here a running serve
	// writes every change to the new index too; once it does, a second
	// pass reads every change committed before, fenced by version.
	if err := cat.Follow(ctx, cfg.Index, family, sink.StateBuilding); err != nil {
		return err
	}
	running, err := cat.ServeRunning(ctx, family)
	if err != nil {
		return err
	}
	if !running {
		// No change arrives without a serve; one started later
		// dual-writes from its first batch.
		fmt.Fprintf(out, "no serve of %s is running: nothing to wait for\n", family)
	} else {
		switch since, err := cat.WaitDualWrite(ctx, cfg.Index, waitServe); {
		case err != nil:
			return err
		case since == nil:
			return fmt.Errorf("a serve of %s is running but did not start writing %s within %s (--wait-serve): is it an older ragsync, or failing to open the index (see its log)? Run reindex again once it does", family, cfg.Index, waitServe)
		default:
			fmt.Fprintf(out, "serve dual-writes %s since %s\n", cfg.Index, since.UTC().Format(time.RFC3339Nano))
		}
	}
	start = time.Now()
	n, stats, err := reindexPass(ctx, ix, from, cfg, pageRows, "off", logger)
	fmt.Fprintf(out, "catch-up pass: %d documents in %s\npipeline: %s\n", n, time.Since(start).Round(time.Millisecond), stats)
	if err != nil {
		return fmt.Errorf("reindex catch-up stopped: %w (run it again: done documents are no-ops)", err)
	}
	if err := cat.Follow(ctx, cfg.Index, family, sink.StateCaughtUp); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s is caught up; switch with: ragsync index promote %s\n", cfg.Index, cfg.Index)
	return nil
}

// reindexPass applies every document of index from to ix once: bulk into
// an empty target (HNSW built at the end) unless bulkMode is off.
func reindexPass(ctx context.Context, ix *service.Index, from string, cfg Config, pageRows int, bulkMode string, logger *slog.Logger) (int64, pipeline.Snapshot, error) {
	src := backfill.NewIndexSource(sink.NewCatalog(ix.Pool, cfg.Postgres.Schema), from, pageRows)
	var snk pipeline.Sink = ix.Store
	var commit pipeline.Committer
	if bulkMode != "off" {
		bulk, err := ix.Store.BeginBulk(ctx)
		switch {
		case errors.Is(err, sink.ErrNotEmpty):
		case err != nil:
			return 0, nil, err
		default:
			logger.Info("target index is empty: bulk load, HNSW index built at the end", "index", cfg.Index)
			// The pipeline flushes the bulk buffer before it acknowledges
			// any page (its commit hook).
			snk, commit = bulk, bulk
			defer func() {
				if err := bulk.Finish(context.WithoutCancel(ctx), sink.BuildOptions{}); err != nil {
					logger.Error("build HNSW index failed; serve builds it at start", "error", err)
				}
			}()
		}
	}
	ch, err := chunker.New(cfg.chunkerConfig())
	if err != nil {
		return 0, nil, err
	}
	// Documents share embedding requests, as serve's changes do.
	emb, stopEmb, err := service.PipelineEmbedder(cfg.embedderConfig(), ix.Emb, nil)
	if err != nil {
		return 0, nil, err
	}
	defer stopEmb()
	p, err := pipeline.New(pipeline.Config{
		Tables: cfg.pipelineTables(), Workers: cfg.Pipeline.Workers, Logger: logger, Registerer: prometheus.NewRegistry(),
		Reuse: cfg.Reuse.pipeline(cfg.Monitor, nil),
	}, pipeline.Stages{
		Source: src, Decoder: backfill.ChangeDecoder{}, Splitter: ch, Embedder: emb, Sink: snk,
		Transient: service.Transient, Fatal: service.Fatal, Commit: commit,
		// New vectors are cached as they are embedded, so an interrupted
		// pass pays nothing twice; the bulk sink takes them from the cache.
		Cache: ix.Store, Lookup: ix.Store,
	})
	if err != nil {
		return 0, nil, err
	}
	err = p.Run(ctx)
	return src.Read(), p.Stats(), err
}
