package monitor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
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

type pending struct {
	id     int64
	hash   string
	text   string
	tokens int
}

// Repair re-embeds exactly the chunks whose last measured distance is past
// the bound (monitor_samples.past_bound) and whose content is still the one
// measured. Each chunk gets the vector of its own text (vector_hash reset
// to its content hash), the cache entry of that text is replaced, and its
// measurement is dropped. Chunks never sampled are not touched: run
// `ragsync fidelity check --sample N` first to measure more.
func (m *Monitor) Repair(ctx context.Context, opts RepairOptions) (RepairResult, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 64
	}
	s := m.st
	var res RepairResult
	// Measurements whose chunk changed since are stale: drop them.
	tag, err := s.pool.Exec(ctx, "DELETE FROM "+s.tSamples+" x WHERE x.index_name = $1 AND NOT EXISTS ("+
		"SELECT 1 FROM "+s.tChunks+" c WHERE c.id = x.chunk_id AND c.index_name = x.index_name AND c.content_hash = x.content_hash)", s.index)
	if err != nil {
		return res, fmt.Errorf("repair %s: drop stale measurements: %w", s.index, err)
	}
	res.Stale = int(tag.RowsAffected())
	rows, err := s.pool.Query(ctx, "SELECT c.id, c.content_hash, c.text, c.tokens FROM "+s.tSamples+" x JOIN "+s.tChunks+
		" c ON c.id = x.chunk_id WHERE x.index_name = $1 AND x.past_bound ORDER BY x.cosine_distance DESC, c.id", s.index)
	if err != nil {
		return res, fmt.Errorf("repair %s: read measurements: %w", s.index, err)
	}
	todo, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
		var p pending
		return p, r.Scan(&p.id, &p.hash, &p.text, &p.tokens)
	})
	if err != nil {
		return res, fmt.Errorf("repair %s: read measurements: %w", s.index, err)
	}
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
			tokens += p.tokens
		}
		if opts.MaxTokens > 0 && res.Tokens+tokens > opts.MaxTokens {
			res.BudgetLeft = len(todo) - start
			break
		}
		texts := make([]string, len(batch))
		for i, p := range batch {
			texts[i] = p.text
		}
		vecs, err := m.emb.Embed(ctx, texts)
		if err != nil {
			return res, fmt.Errorf("repair %s: embed %d chunks: %w", s.index, len(batch), err)
		}
		if len(vecs) != len(batch) {
			return res, fmt.Errorf("repair %s: embedder returned %d vectors for %d texts", s.index, len(vecs), len(batch))
		}
		res.Tokens += tokens
		m.metrics.tokens.WithLabelValues("repair").Add(float64(tokens))
		b := &pgx.Batch{}
		for i, p := range batch {
			v := pgvector.NewVector(vecs[i])
			// The content-hash guard: a chunk rewritten since the read keeps
			// what the pipeline gave it.
			b.Queue("UPDATE "+s.tChunks+" SET embedding = $3, vector_hash = content_hash WHERE id = $1 AND content_hash = $2", p.id, p.hash, v)
			b.Queue("INSERT INTO "+s.tCache+" (model, dimensions, content_hash, embedding, text) VALUES ($1, $2, $3, $4, $5)"+
				" ON CONFLICT (model, dimensions, content_hash) DO UPDATE SET embedding = excluded.embedding, text = excluded.text,"+
				" created_at = now(), last_used_at = now()", s.model, s.dims, p.hash, v, p.text)
			b.Queue("DELETE FROM "+s.tSamples+" WHERE index_name = $1 AND chunk_id = $2", s.index, p.id)
		}
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return res, fmt.Errorf("repair %s: write %d vectors: %w", s.index, len(batch), err)
		}
		res.Repaired += len(batch)
		if opts.Progress != nil {
			opts.Progress(res.Repaired, len(todo))
		}
	}
	return res, nil
}
