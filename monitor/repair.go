package monitor

import (
	"context"
	"fmt"

	"github.com/ragsync/ragsync/sink"
)

// RepairOptions bound one repair run.
type RepairOptions struct {
	// MaxTokens stops the repair before it would send more tokens; 0 means
	// no limit.
	MaxTokens int
	// BatchSize is the number of chunks per embedding request. Defaults to
	// 64.
	BatchSize int
	// Progress, if set, is called after each batch with the chunks done and
	// the total.
	Progress func(done, total int)
	// DryRun counts what would be repaired without embedding anything.
	DryRun bool
}

// RepairResult says what a repair did.
type RepairResult struct {
	// Pending is the number of chunks measured past the bound whose text
	// is unchanged since.
	Pending int
	// Repaired chunks got a fresh vector of their own text.
	Repaired int
	// Tokens sent to the embedding API.
	Tokens int
	// Stale counts measurements dropped because their chunk is gone or its
	// text changed (the pipeline embedded it again anyway).
	Stale int
	// BudgetLeft is the number of pending chunks left for lack of budget.
	BudgetLeft int
}

// RepairStore is what Repair needs from the sink: the chunks measured past
// the bound, and the one write path that gives chunks vectors of their own
// text (which the background repayment of reuse debt uses too).
type RepairStore interface {
	MeasuredPastBound(ctx context.Context, forgetStale bool) ([]sink.Debt, int, error)
	RewriteVectors(ctx context.Context, rws []sink.Rewrite, onlyDebt bool) (int, error)
}

// Repair re-embeds exactly the chunks whose last measured distance is past
// the bound (monitor_samples.past_bound) and whose content is still the one
// measured. Each chunk gets the vector of its own text (its reuse debt, if
// any, is cleared), the cache entry of that text is replaced, and its
// measurement is dropped (sink.Store.RewriteVectors). Chunks never sampled
// are not touched: run `ragsync fidelity check --sample N` first to
// measure more; serve's background repayment replaces every reused vector
// within reuse.repay_window anyway.
func (m *Monitor) Repair(ctx context.Context, st RepairStore, opts RepairOptions) (RepairResult, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 64
	}
	index := m.st.index
	var res RepairResult
	todo, stale, err := st.MeasuredPastBound(ctx, !opts.DryRun)
	if err != nil {
		return res, fmt.Errorf("repair %s: %w", index, err)
	}
	res.Stale = stale
	res.Pending = len(todo)
	if opts.DryRun {
		return res, nil
	}
	if opts.Progress != nil {
		opts.Progress(0, len(todo))
	}
	for start := 0; start < len(todo); start += opts.BatchSize {
		batch := todo[start:min(start+opts.BatchSize, len(todo))]
		tokens := 0
		for _, p := range batch {
			tokens += p.Tokens
		}
		if opts.MaxTokens > 0 && res.Tokens+tokens > opts.MaxTokens {
			res.BudgetLeft = len(todo) - start
			break
		}
		texts := make([]string, len(batch))
		for i, p := range batch {
			texts[i] = p.Text
		}
		vecs, err := m.emb.Embed(ctx, texts)
		if err != nil {
			return res, fmt.Errorf("repair %s: embed %d chunks: %w", index, len(batch), err)
		}
		if len(vecs) != len(batch) {
			return res, fmt.Errorf("repair %s: embedder returned %d vectors for %d texts", index, len(vecs), len(batch))
		}
		res.Tokens += tokens
		m.metrics.tokens.WithLabelValues("repair").Add(float64(tokens))
		rws := make([]sink.Rewrite, len(batch))
		for i, p := range batch {
			rws[i] = sink.Rewrite{ChunkID: p.ChunkID, Hash: p.Hash, Text: p.Text, Vector: vecs[i]}
		}
		if _, err := st.RewriteVectors(ctx, rws, false); err != nil {
			return res, fmt.Errorf("repair %s: %w", index, err)
		}
		res.Repaired += len(batch)
		if opts.Progress != nil {
			opts.Progress(res.Repaired, len(todo))
		}
	}
	return res, nil
}
