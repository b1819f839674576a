package sink

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// CacheVectors writes embeddings to the embedding cache under their content
// hashes (with the text each was computed from), for this store's model and
// dimensions, in its own short transaction. The pipeline calls it for each
// slice of a large document as the vectors arrive, so they are kept even if
// the document's own transaction never commits, and a later Upsert of chunks
// with nil vectors takes them from here. Entries are written in hash order,
// like Upsert's, so concurrent writers cannot deadlock on them.
func (s *Store) CacheVectors(ctx context.Context, hashes, texts []string, vecs [][]float32) error {
	if len(hashes) != len(vecs) || len(hashes) != len(texts) {
		return fmt.Errorf("cache vectors: %d hashes, %d texts, %d vectors: %w", len(hashes), len(texts), len(vecs), ErrInvalidDocument)
	}
	if len(hashes) == 0 {
		return nil
	}
	order := make([]int, len(hashes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case hashes[a] < hashes[b]:
			return -1
		case hashes[a] > hashes[b]:
			return 1
		}
		return 0
	})
	keys := make([]string, 0, len(hashes))
	ts := make([]string, 0, len(hashes))
	vs := make([]pgvector.Vector, 0, len(hashes))
	for _, i := range order {
		if len(vecs[i]) != s.cfg.Dimensions {
			return fmt.Errorf("cache vectors: vector of %s has %d dimensions, want %d: %w", hashes[i], len(vecs[i]), s.cfg.Dimensions, ErrInvalidDocument)
		}
		if len(keys) > 0 && keys[len(keys)-1] == hashes[i] {
			continue
		}
		keys, ts, vs = append(keys, hashes[i]), append(ts, texts[i]), append(vs, pgvector.NewVector(vecs[i]))
	}
	_, err := s.pool.Exec(ctx, "INSERT INTO "+s.tCache+" AS c (model, dimensions, content_hash, embedding, text)"+
		" SELECT $1, $2, u.h, u.e, u.t FROM unnest($3::text[], $4::vector[], $5::text[]) WITH ORDINALITY AS u(h, e, t, n) ORDER BY u.n"+
		" ON CONFLICT (model, dimensions, content_hash) DO UPDATE SET last_used_at = now(), text = coalesce(c.text, excluded.text)",
		s.cfg.Model, s.cfg.Dimensions, keys, vs, ts)
	if err != nil {
		return fmt.Errorf("cache %d vectors: %w", len(keys), classify(err, s.cfg.Schema))
	}
	return nil
}

// Cached reports which of hashes have a vector in the embedding cache for
// this store's model and dimensions, without reading the vectors, and marks
// them used as Vectors does. For documents too large to hold all their
// vectors at once.
func (s *Store) Cached(ctx context.Context, hashes []string) (map[string]bool, error) {
	out := make(map[string]bool, len(hashes))
	if len(hashes) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, "SELECT content_hash FROM "+s.tCache+
		" WHERE model = $1 AND dimensions = $2 AND content_hash = ANY($3)", s.cfg.Model, s.cfg.Dimensions, hashes)
	if err != nil {
		return nil, fmt.Errorf("look up %d hashes in the cache: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up %d hashes in the cache: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	for _, h := range have {
		out[h] = true
	}
	if len(have) > 0 {
		if err := s.touchCache(ctx, have); err != nil {
			return nil, fmt.Errorf("mark %d cached vectors used: %w", len(have), classify(err, s.cfg.Schema))
		}
	}
	return out, nil
}
