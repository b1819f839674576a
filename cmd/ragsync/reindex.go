package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func newReindexCmd(g *globals) *cobra.Command {
	var to, model string
	var dims, pageRows int
	var bulkMode string
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Build another index (model, dimensions) from the documents the current one stores",
		Long: `reindex builds index --to from the documents stored in the configured index
(index:), with --model and --dimensions: it needs no access to the document
database. Every document keeps its version, deleted ones their tombstone, so
running reindex again later only applies what changed in between; an empty
target is loaded with COPY and its HNSW index built at the end. The embedding
cache serves chunks already embedded with the same model and dimensions.

Switch to the new index by setting index: (and the embedder) in the config and
restarting serve; ragsync index list shows both, ragsync index drop removes
the old one.`,
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
			}
			if cmd.Flags().Changed("dimensions") {
				target.Embedder.Dimensions = dims
			}
			if err := errors.Join(append(errs, target.validate(false))...); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return reindex(ctx, cmd, from, target, pageRows, bulkMode)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "name of the index to build (required)")
	cmd.Flags().StringVar(&model, "model", "", "embedding model of the new index (default embedder.model)")
	cmd.Flags().IntVar(&dims, "dimensions", 0, "output dimensions of the new index (default embedder.dimensions)")
	cmd.Flags().IntVar(&pageRows, "page-rows", 500, "documents per batch")
	cmd.Flags().StringVar(&bulkMode, "bulk", "auto", "auto: COPY into an empty target and build its HNSW index at the end; off: always upsert")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func reindex(ctx context.Context, cmd *cobra.Command, from string, cfg Config, pageRows int, bulkMode string) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, false).With("command", "reindex")
	ix, err := openIndex(ctx, cfg, logger, nil)
	if err != nil {
		return err
	}
	defer ix.Close()
	var exists bool
	if err := ix.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM indexes WHERE name = $1)", from).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("index: %q does not exist in schema %s; nothing to reindex from (ragsync index list shows what does)", from, cfg.Postgres.Schema)
	}
	src := backfill.NewIndexSource(ix.pool, from, pageRows)
	var source pipeline.Source = src
	var snk pipeline.Sink = ix.st
	if bulkMode != "off" {
		bulk, err := ix.st.BeginBulk(ctx)
		switch {
		case errors.Is(err, sink.ErrNotEmpty):
		case err != nil:
			return err
		default:
			logger.Info("target index is empty: bulk load, HNSW index built at the end", "index", cfg.Index)
			snk, source = bulk, flushingSource{src, bulk}
			defer func() {
				if err := bulk.Finish(context.WithoutCancel(ctx), sink.BuildOptions{}); err != nil {
					logger.Error("build HNSW index failed; serve builds it at start", "error", err)
				}
			}()
		}
	}
	ch, err := chunker.New(cfg.chunkerConfig())
	if err != nil {
		return err
	}
	reusing, err := pipeline.WithReuse(ix.emb, cfg.Reuse.pipeline())
	if err != nil {
		return err
	}
	p, err := pipeline.New(pipeline.Config{
		Tables: cfg.pipelineTables(), Workers: cfg.Pipeline.Workers, Logger: logger, Registerer: prometheus.NewRegistry(),
	}, pipeline.Stages{
		Source: source, Decoder: backfill.ChangeDecoder{}, Splitter: ch, Embedder: reusing, Sink: snk,
		Transient: transient, Fatal: fatal,
	})
	if err != nil {
		return err
	}
	start := time.Now()
	runErr := p.Run(ctx)
	fmt.Fprintf(cmd.OutOrStdout(), "reindex %s -> %s (%s, %d dimensions): %d documents in %s\npipeline: %s\n",
		from, cfg.Index, ix.emb.Model(), ix.emb.Dimensions(), src.Read(), time.Since(start).Round(time.Millisecond), p.Stats())
	if runErr != nil {
		return fmt.Errorf("reindex stopped: %w (fix the cause and run it again: done documents are no-ops)", runErr)
	}
	return nil
}
