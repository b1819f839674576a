package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

var (
	_ pipeline.Source = (*backfill.Source)(nil)
	_ pipeline.Index  = (*backfill.DryRun)(nil)
	_ pipeline.Index  = (*sink.Store)(nil)
)

type backfillFlags struct {
	sourceURL string
	tables    []string
	where     string
	resume    bool
	rate      float64
	pageRows  int
	dryRun    bool
	price     float64
	progress  string
	bulk      string
	// noReconcile keeps the documents whose rows are gone.
	noReconcile bool
	// reconcileMax bounds what one table's reconcile may delete ("10%",
	// "0.1", "500"); yes lifts the bound.
	reconcileMax string
	yes          bool
	// reconcileUnknown claims documents stored before versions named
	// their source.
	reconcileUnknown bool
	// createIndex creates the configured index beside existing ones.
	createIndex bool
	// batch sets embedder.batch.enabled.
	batch    bool
	debezium debeziumFlags
	// tty is whether stderr is a terminal (globals.stderrTTY).
	tty bool
}

func newBackfillCmd(g *globals) *cobra.Command {
	var f backfillFlags
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "Read the document database's tables into the index, beside live CDC",
		Long: `backfill reads the rows of the configured tables (tables[].match, or --table)
straight from the document database, page by page in primary-key order, in
one consistent snapshot, and feeds them through the same pipeline as streamed
changes: templates, chunking, the embedding cache, reuse and the sink. Every
row carries a version at the snapshot's WAL position, so it can run while
serve applies live changes: a change committed after the snapshot always
wins, and a backfill never regresses a document (docs/backfill.md).

A checkpoint per table is kept in the index's schema, naming the key columns
and --where it belongs to; --resume continues after Ctrl-C or a crash (and
refuses a checkpoint of other key columns or another --where), and
re-reading a page costs no embedding calls (vectors are cached as they are
embedded). A table read whole in this run's snapshot (no --where, not
resumed) is then reconciled: its documents whose rows are gone are deleted,
at the snapshot's version, so a change committed after the snapshot is
never undone; --no-reconcile keeps them. --dry-run reads and chunks without
embedding or writing, opens the index read-only, and prints what a real run
would send to the embedding API and how many documents it would delete.

The index is created when the schema has none yet; beside existing indexes
an unknown index: is refused as a likely typo, naming the nearest one, and
--create-index creates it anyway. --dry-run creates nothing: with no index
yet, it prices the first backfill against an empty one. It prices both lanes:
online (backfill.price_per_million_tokens) and --batch
(backfill.batch_price_per_million_tokens, by default half the online price).

--batch (embedder.batch.enabled) reads the rows once before the run to list
the texts it would embed, sends them through the provider's Batch API (half
price, done within 24h), records every batch in the index's schema and polls
until they end; the run then finds their vectors cached. Interrupted or
killed, the batches keep running at the provider: run the same command again
(with --resume) to apply them without submitting any twice.

The embedder is checked before a row is read, as serve checks it. Reuse
debt (chunks on a near-duplicate's vector) is repaid before the backfill
exits, and with no serve of the index running throughout, it warns that
rows changed after the snapshot wait for serve or another backfill. Ctrl-C
or SIGTERM exits 5, like serve --once.`,
		Example: `  ragsync backfill --config ragsync.yaml --source-url postgres://app@db:5432/app
  ragsync backfill --config ragsync.yaml --table public.articles --where "t.updated_at > now() - interval '30 days'"
  ragsync backfill --config ragsync.yaml --resume --rate 200
  ragsync backfill --config ragsync.yaml --dry-run --price-per-million-tokens 0.02
  ragsync backfill --config ragsync.yaml --via debezium --signal-table public.debezium_signal
  ragsync backfill --config ragsync.yaml --via debezium --signal-topic dbserver1.signals --stop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if f.sourceURL != "" {
				cfg.Backfill.SourceURL = f.sourceURL
			}
			if cmd.Flags().Changed("rate") {
				cfg.Backfill.Rate = f.rate
			}
			if cmd.Flags().Changed("page-rows") {
				cfg.Backfill.PageRows = f.pageRows
			}
			if cmd.Flags().Changed("price-per-million-tokens") {
				cfg.Backfill.PricePerMillionTokens = f.price
			}
			if cmd.Flags().Changed("batch") {
				cfg.Embedder.Batch.Enabled = f.batch
			}
			bc, bErr := cfg.BackfillSource(f.tables, f.where, f.resume && !f.dryRun, f.debezium.signalTopic == "")
			if f.debezium.connectorName != "" {
				bc.DebeziumServer = f.debezium.connectorName
			}
			limit, lErr := reconcileLimit(f)
			bc.ReconcileLimit, bc.DryRun, bc.ReconcileUnknown = limit, f.dryRun, f.reconcileUnknown
			if err := errors.Join(cfg.Validate(false), bErr, lErr); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if f.debezium.via != "" {
				return viaDebezium(ctx, cmd, cfg, bc, f.debezium)
			}
			f.tty = g.stderrTTY
			return runBackfill(ctx, cmd, cfg, bc, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.sourceURL, "source-url", "", "document database to read (backfill.source_url; default source.postgres.url)")
	fl.StringArrayVar(&f.tables, "table", nil, "schema.table to backfill (repeatable; default every tables[].match that names one table)")
	fl.StringVar(&f.where, "where", "", "one boolean SQL expression on the rows to read, columns by name, checked before reading (with --via debezium: the additional-conditions filter)")
	fl.BoolVar(&f.resume, "resume", false, "continue each table after its checkpoint instead of starting over")
	fl.Float64Var(&f.rate, "rate", 0, "cap rows read per second, held per row over any second (backfill.rate; 0 = no cap)")
	fl.IntVar(&f.pageRows, "page-rows", 0, "rows per page and checkpoint (backfill.page_rows; default 500)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "read and chunk only; print documents, chunks, tokens to embed after the cache, cost and time")
	fl.Float64Var(&f.price, "price-per-million-tokens", 0, "embedding price for --dry-run's cost (backfill.price_per_million_tokens)")
	fl.StringVar(&f.progress, "progress", "auto", "progress display: auto (bar on a TTY, log lines otherwise), bar, log, none")
	fl.BoolVar(&f.noReconcile, "no-reconcile", false, "keep the documents whose rows are gone (default: a table read whole deletes them)")
	fl.StringVar(&f.reconcileMax, "reconcile-max", "", `most a table's reconcile may delete: a share ("10%", "0.1") or a count ("500"); past it the run stops before deleting (default 10%, at least 5 documents)`)
	fl.BoolVar(&f.yes, "yes", false, "let the reconcile delete past --reconcile-max")
	fl.BoolVar(&f.reconcileUnknown, "reconcile-unknown", false, "also reconcile documents stored before versions named their source, taking them as this database's (only when no other database or connector ever wrote the table)")
	fl.BoolVar(&f.createIndex, "create-index", false, "create the configured index even though the schema holds other indexes (without it, an unknown index: beside them is refused as a likely typo)")
	fl.BoolVar(&f.batch, "batch", false, batchFlagHelp)
	fl.StringVar(&f.bulk, "bulk", "auto", "auto: into an empty index, load with COPY and build the HNSW index at the end; off: always the streaming path")
	f.debezium.register(cmd)
	return cmd
}

func runBackfill(ctx context.Context, cmd *cobra.Command, cfg Config, bc backfill.Config, f backfillFlags) error {
	logger := newLogger(cmd.ErrOrStderr(), cfg.Log, false).With("command", "backfill")
	ic := cfg.indexConfig()
	ic.Create = f.createIndex
	bf := service.BackfillConfig{Index: ic, Source: bc, Pipeline: cfg.servicePipelineConfig(),
		DryRun: f.dryRun, Bulk: f.bulk != "off", Reconcile: !f.noReconcile, Logger: logger,
		Progress: func(src *backfill.Source, p *pipeline.Pipeline, done <-chan struct{}) {
			reportProgress(cmd.ErrOrStderr(), progressMode(f.progress, f.tty), src, p, logger, done)
		},
		BatchProgress: batchProgress(cmd.ErrOrStderr(), progressMode(f.progress, f.tty) == "bar", logger),
		Resume:        "ragsync backfill --batch --resume (with the same config and flags)"}
	if f.dryRun {
		// The pipeline's own summary counts what a dry run only pretends
		// to apply; the dry run's lines say what it did.
		bf.PipelineLogger = newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn", Format: cfg.Log.Format}, false).With("command", "backfill")
	}
	res, err := service.Backfill(ctx, bf)
	if err != nil {
		return err
	}
	pr, elapsed, out := res.Read, res.Took, cmd.OutOrStdout()
	// A run that stopped before reading every row reconciled nothing:
	// its summary must not say "0 documents deleted".
	interrupted := ctx.Err() != nil && !pr.Done && (res.Err == nil || errors.Is(res.Err, context.Canceled))
	fmt.Fprintf(out, "backfill: %d rows read (%d superseded by later changes, %d re-checked), snapshot at %s, %s (%.0f rows/s)\n",
		pr.Rows, pr.Superseded, pr.Rechecked, pr.Position, elapsed.Round(time.Millisecond), float64(pr.Rows)/max(elapsed.Seconds(), 1e-9))
	if res.Err != nil || interrupted {
		// No reconcile ran; the error below says why.
	} else if f.noReconcile {
		fmt.Fprintln(out, "reconcile: off (--no-reconcile), documents whose rows are gone were kept")
	} else {
		verb := "deleted"
		if f.dryRun {
			verb = "would be deleted"
		}
		line := fmt.Sprintf("reconcile: %d documents whose rows are gone %s", pr.Reconciled, verb)
		if pr.LeftAlone > 0 {
			line += fmt.Sprintf("; %d documents left alone (written by another source or before versions named their source, or keys not of the table's id columns)", pr.LeftAlone)
		}
		if pr.Unreconciled > 0 {
			line += fmt.Sprintf("; %d table(s) not reconciled (--where, or resumed from an earlier snapshot)", pr.Unreconciled)
		}
		fmt.Fprintln(out, line)
		for _, r := range pr.Refused {
			fmt.Fprintf(out, "reconcile: a real run would stop here: %v\n", r)
		}
	}
	switch {
	case res.Bulk && res.BuildErr == nil:
		fmt.Fprintf(out, "bulk load: HNSW index built in %s (included above)\n", res.Build.Round(time.Millisecond))
	case res.Bulk:
		fmt.Fprintf(out, "bulk load: HNSW index build failed after %s: %v (serve builds it at start)\n", res.Build.Round(time.Millisecond), res.BuildErr)
	}
	if res.Batch != nil {
		fmt.Fprintln(out, batchSummary(*res.Batch))
	}
	if e := res.Estimate; e == nil {
		fmt.Fprintf(out, "pipeline: %s\n", res.Stats)
	} else {
		fmt.Fprintln(out, "dry run: nothing was embedded or written")
		ec := cfg.EmbedderConfig()
		fmt.Fprintf(out, "dry run: %d documents, %d chunks; to embed after the cache: %d texts, %d tokens in %d calls\n",
			e.Documents, e.Chunks, e.Texts, e.Tokens, e.Requests)
		if online, batch := cfg.Backfill.PricePerMillionTokens, cfg.Backfill.BatchPrice(); online > 0 || batch > 0 {
			fmt.Fprintf(out, "dry run: estimated cost %.4f at %g per million tokens\n", e.Cost(online), online)
			fmt.Fprintf(out, "dry run: estimated cost with --batch %.4f at %g per million tokens (the batch lane: done within 24h)\n", e.Cost(batch), batch)
			logger.Info("dry run estimate", "tokens", e.Tokens, "cost_online", e.Cost(online), "price_online", online,
				"cost_batch", e.Cost(batch), "price_batch", batch)
		}
		embedTime := e.Duration(ec.RequestsPerMinute, ec.TokensPerMinute)
		readTime := time.Duration(0)
		if cfg.Backfill.Rate > 0 {
			readTime = time.Duration(float64(pr.Rows) / cfg.Backfill.Rate * float64(time.Second))
		}
		fmt.Fprintf(out, "dry run: estimated time at the configured limits: %s (embedding at %d requests/min, %d tokens/min: %s; reading at %g rows/s: %s; 0 = no limit)\n",
			max(embedTime, readTime).Round(time.Second), ec.RequestsPerMinute, ec.TokensPerMinute, embedTime.Round(time.Second), cfg.Backfill.Rate, readTime.Round(time.Second))
	}
	if d := res.Repaid; d.Repaid > 0 || d.Outstanding.Vectors > 0 {
		fmt.Fprintf(out, "reuse debt: %d reused vectors replaced by exact ones (%d tokens sent)", d.Repaid, d.Tokens)
		if d.Outstanding.Vectors > 0 {
			fmt.Fprintf(out, "; %d left past reuse.repay_max_tokens_per_hour, for serve to repay", d.Outstanding.Vectors)
		}
		fmt.Fprintln(out)
	}
	if interrupted {
		// serve's code for a run a signal stopped: what was applied is
		// committed, and --resume continues.
		return &exitError{ExitInterrupted, fmt.Errorf("backfill interrupted after %d rows: run again with --resume to continue", pr.Rows)}
	}
	if res.Err != nil {
		return fmt.Errorf("backfill stopped: %w (fix the cause, then run again with --resume)", res.Err)
	}
	if res.Unserved {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: no ragsync serve of index %q ran through this backfill: rows changed after its snapshot (at %s) are fenced out of it and nothing applies them yet; "+
			"start ragsync serve to apply them from the change stream (a serve that creates its Postgres slot only now starts after them: run backfill again once it runs), or run backfill again to read them as they are now\n",
			cfg.Index, pr.Position)
	}
	return nil
}

// reconcileLimit reads --reconcile-max and --yes.
func reconcileLimit(f backfillFlags) (*cdc.ReconcileLimit, error) {
	l := cdc.DefaultReconcileLimit
	if f.reconcileMax != "" {
		var err error
		if l, err = cdc.ParseReconcileLimit(f.reconcileMax); err != nil {
			return nil, fmt.Errorf("--reconcile-max %w", err)
		}
	}
	l.Unlimited = f.yes
	return &l, nil
}

// progressMode resolves --progress auto: a bar when stderr is a terminal,
// log lines otherwise.
func progressMode(mode string, tty bool) string {
	switch {
	case mode != "auto":
		return mode
	case tty:
		return "bar"
	}
	return "log"
}

// reportProgress draws a bar (mode bar), or logs a line every 10s (mode
// log), until done.
func reportProgress(w io.Writer, mode string, src *backfill.Source, p *pipeline.Pipeline, logger *slog.Logger, done <-chan struct{}) {
	switch mode {
	case "bar":
		total := src.Progress().Total
		if total <= 0 {
			total = -1 // unknown: a spinner
		}
		bar := progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("backfill"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
		)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			pr := src.Progress()
			st := p.Stats()
			bar.Describe(fmt.Sprintf("%s (%d chunks embedded)", pr.Table, st["chunks_embedded"]))
			_ = bar.Set64(pr.Rows)
			select {
			case <-done:
				_ = bar.Finish()
				fmt.Fprintln(w)
				return
			case <-t.C:
			}
		}
	case "log":
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			pr := src.Progress()
			st := p.Stats()
			rate := float64(pr.Rows) / time.Since(start).Seconds()
			eta := "unknown"
			if rate > 0 && pr.Total > pr.Rows {
				eta = time.Duration(float64(pr.Total-pr.Rows) / rate * float64(time.Second)).Round(time.Second).String()
			}
			logger.Info("backfill progress", "table", pr.Table, "rows", pr.Rows, "total", pr.Total, "total_exact", pr.Exact,
				"rows_per_second", int(rate), "chunks_embedded", st["chunks_embedded"], "eta", eta)
		}
	default:
		<-done
	}
}
