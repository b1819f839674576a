package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

func newReindexCmd(g *globals) *cobra.Command {
	var to, model, indexType string
	var dims, pageRows, hnswM, hnswEfConstruction int
	var bulkMode string
	var waitServe time.Duration
	var force, batch bool
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Build another index (model, dimensions, vector type) from the documents the current one stores",
		Long: `reindex builds index --to from the documents stored in the configured index
(index:), with --model and --dimensions, stored and indexed as --index-type
(vector, halfvec or bit) with the HNSW parameters --hnsw-m and
--hnsw-ef-construction: it needs no access to the document database. Every
document keeps its version, deleted ones their tombstone, so running reindex
again later only applies what changed in between; an empty target is loaded
with COPY and its HNSW index built at the end. The embedding cache serves
chunks already embedded with the same model and dimensions, whatever the
type: changing only the type or the HNSW parameters re-embeds nothing.

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
of another alias is refused even then.

--batch (embedder.batch.enabled) sends the texts the first pass would embed
through the provider's Batch API first, at half the online price: the
batches are recorded in the index's schema, polled every
embedder.batch.poll_interval and their vectors cached, then the pass runs
and finds them there. Killed or interrupted, the batches keep running at
the provider: running the same command again resumes them without
submitting any twice. Texts a batch does not answer are embedded online.`,
		Example: `  ragsync reindex --config ragsync.yaml --to articles_v2 --model text-embedding-3-large --dimensions 1024
  ragsync reindex --config ragsync.yaml --to articles_half --index-type halfvec --hnsw-m 24 --hnsw-ef-construction 128
  ragsync reindex --config ragsync.yaml --to articles_v3 --model text-embedding-3-large --batch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			from := cfg.Index
			var errs []error
			if !config.IndexName.MatchString(to) {
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
			if cmd.Flags().Changed("index-type") {
				target.IndexType = indexType
				if indexType != string(sink.TypeBit) {
					// The configured index's re-rank setting is not the
					// new one's: only a bit index re-ranks.
					target.HNSW.RerankCandidates = 0
				}
			}
			if cmd.Flags().Changed("hnsw-m") {
				target.HNSW.M = hnswM
			}
			if cmd.Flags().Changed("hnsw-ef-construction") {
				target.HNSW.EfConstruction = hnswEfConstruction
			}
			if cmd.Flags().Changed("batch") {
				target.Embedder.Batch.Enabled = batch
			}
			if err := errors.Join(append(errs, target.Validate(false))...); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return reindex(ctx, cmd, g, from, target, pageRows, bulkMode, waitServe, force)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "name of the index to build (required)")
	cmd.Flags().StringVar(&model, "model", "", "embedding model of the new index (default embedder.model)")
	cmd.Flags().IntVar(&dims, "dimensions", 0, "output dimensions of the new index (default embedder.dimensions)")
	cmd.Flags().StringVar(&indexType, "index-type", "", "how the new index stores and indexes its vectors: vector, halfvec or bit (default index_type)")
	cmd.Flags().IntVar(&hnswM, "hnsw-m", 0, "HNSW m of the new index, 2..100 (default hnsw.m, else 16)")
	cmd.Flags().IntVar(&hnswEfConstruction, "hnsw-ef-construction", 0, "HNSW ef_construction of the new index, at least 2 × m (default hnsw.ef_construction, else 64)")
	cmd.Flags().IntVar(&pageRows, "page-rows", 500, "documents per batch")
	cmd.Flags().StringVar(&bulkMode, "bulk", "auto", "auto: COPY into an empty target and build its HNSW index at the end; off: always upsert")
	cmd.Flags().DurationVar(&waitServe, "wait-serve", time.Minute, "after the first pass, how long to wait for a running serve to start writing every change to the new index too")
	cmd.Flags().BoolVar(&batch, "batch", false, batchFlagHelp)
	cmd.Flags().BoolVar(&force, "force", false, "write into --to even when it holds documents of another family or of none (never another alias's live index)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func reindex(ctx context.Context, cmd *cobra.Command, g *globals, family string, cfg Config, pageRows int, bulkMode string, waitServe time.Duration, force bool) error {
	out := cmd.OutOrStdout()
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, false).With("command", "reindex")
	return service.Reindex(ctx, service.ReindexConfig{
		Target: cfg.indexConfig(), Family: family, Pipeline: cfg.servicePipelineConfig(),
		PageRows: pageRows, Bulk: bulkMode != "off", WaitServe: waitServe, Force: force,
		Logger: logger, Resume: fmt.Sprintf("ragsync reindex --to %s --batch (with the same config and flags)", cfg.Index),
		BatchProgress: batchProgress(cmd.ErrOrStderr(), g.stderrTTY, logger),
		Report: func(s service.ReindexStep) {
			switch s.Step {
			case service.StepBatchLane:
				if s.Err == nil {
					fmt.Fprintln(out, batchSummary(s.Batch))
				}
			case service.StepStarted:
				// The first pass re-embeds every document and may take
				// long: say it began.
				fmt.Fprintf(out, "reindex %s -> %s (%s, %d dimensions, %s) started: reading every document of %s; a summary follows when the pass ends\n",
					s.From, cfg.Index, s.Model, s.Dimensions, s.Type, s.From)
			case service.StepFirstPass:
				fmt.Fprintf(out, "reindex %s -> %s (%s, %d dimensions, %s): %d documents in %s\npipeline: %s\n",
					s.From, cfg.Index, s.Model, s.Dimensions, s.Type, s.Documents, s.Took.Round(time.Millisecond), s.Stats)
			case service.StepNoServe:
				fmt.Fprintf(out, "no serve of %s is running: nothing to wait for\n", family)
			case service.StepDualWrite:
				fmt.Fprintf(out, "serve dual-writes %s since %s\n", cfg.Index, s.Since.UTC().Format(time.RFC3339Nano))
			case service.StepCatchUp:
				fmt.Fprintf(out, "catch-up pass: %d documents in %s\npipeline: %s\n", s.Documents, s.Took.Round(time.Millisecond), s.Stats)
			case service.StepCaughtUp:
				fmt.Fprintf(out, "%s is caught up; switch with: ragsync index promote %s\n", cfg.Index, cfg.Index)
			}
		},
	})
}
