package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
)

// store reads the index's tables and keeps the monitor's own (migration
// 00007). Names are schema-qualified, so it works whatever the pool's
// search_path is.
type store struct {
	pool       *pgxpool.Pool
	index      string
	model      string
	dims       int
	tChunks    string
	tCache     string
	tCanaries  string
	tSamples   string
	tWindows   string
	tWinVecs   string
	tIndexes   string
	chunkBatch int
}

func newStore(pool *pgxpool.Pool, schema, index, model string, dims int) *store {
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	return &store{
		pool: pool, index: index, model: model, dims: dims,
		tChunks: q("chunks"), tCache: q("embedding_cache"), tCanaries: q("monitor_canaries"),
		tSamples: q("monitor_samples"), tWindows: q("monitor_windows"), tWinVecs: q("monitor_window_vectors"),
		tIndexes: q("indexes"), chunkBatch: 2000,
	}
}

func textHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

type canary struct {
	hash, text string
	vec        []float32
	takenBy    string
	takenAt    time.Time
}

// canaries returns the stored canaries among texts, by text hash.
func (s *store) canaries(ctx context.Context) (map[string]canary, error) {
	rows, err := s.pool.Query(ctx, "SELECT text_hash, text, embedding, coalesce(taken_by, ''), created_at FROM "+s.tCanaries+" WHERE index_name = $1", s.index)
	if err != nil {
		return nil, fmt.Errorf("read canaries of %s: %w", s.index, err)
	}
	out := map[string]canary{}
	for rows.Next() {
		var c canary
		var v pgvector.Vector
		if err := rows.Scan(&c.hash, &c.text, &v, &c.takenBy, &c.takenAt); err != nil {
			rows.Close()
			return nil, err
		}
		c.vec = v.Slice()
		out[c.hash] = c
	}
	return out, rows.Err()
}

// addCanaries stores baselines taken by by; an existing baseline is kept
// (resetCanaries forgets them).
func (s *store) addCanaries(ctx context.Context, cs []canary, by string) error {
	b := &pgx.Batch{}
	for _, c := range cs {
		b.Queue("INSERT INTO "+s.tCanaries+" (index_name, text_hash, text, embedding, taken_by) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
			s.index, c.hash, c.text, pgvector.NewVector(c.vec), by)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d canaries of %s: %w", len(cs), s.index, err)
	}
	return nil
}

// resetCanaries forgets every baseline of the index.
func (s *store) resetCanaries(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM "+s.tCanaries+" WHERE index_name = $1", s.index); err != nil {
		return fmt.Errorf("reset canaries of %s: %w", s.index, err)
	}
	return nil
}

// sampled is a stored chunk picked for re-embedding.
type sampled struct {
	id     int64
	hash   string
	text   string
	tokens int
	vec    []float32
	kind   string
}

// Sample kinds, the label of every fidelity aggregate.
const (
	KindCanary  = "canary"
	KindReused  = "reused"
	KindCached  = "cached"
	KindUniform = "uniform"
)

// sampleChunks picks up to n chunks of each kind. Reused and uniform picks
// start at random ids and take the next matching row (one index probe
// each, never a scan of the table); a chunk behind a long gap of ids is
// thus a little likelier than its neighbours. Cached picks are drawn from
// the 10·n oldest cache entries still used by a chunk.
func (s *store) sampleChunks(ctx context.Context, rng *rand.Rand, nReused, nCached, nUniform int) ([]sampled, error) {
	var lo, hi int64
	err := s.pool.QueryRow(ctx, "SELECT coalesce(min(id), 0), coalesce(max(id), 0) FROM "+s.tChunks+" WHERE index_name = $1", s.index).Scan(&lo, &hi)
	if err != nil {
		return nil, fmt.Errorf("sample chunks of %s: %w", s.index, err)
	}
	if hi == 0 {
		return nil, nil
	}
	starts := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = lo + rng.Int64N(hi-lo+1)
		}
		return out
	}
	var out []sampled
	seen := map[int64]bool{}
	collect := func(kind, sql string, args ...any) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("sample %s chunks of %s: %w", kind, s.index, err)
		}
		defer rows.Close()
		for rows.Next() {
			var c sampled
			var v pgvector.Vector
			if err := rows.Scan(&c.id, &c.hash, &c.text, &c.tokens, &v); err != nil {
				return err
			}
			if seen[c.id] {
				continue
			}
			seen[c.id] = true
			c.vec, c.kind = v.Slice(), kind
			out = append(out, c)
		}
		return rows.Err()
	}
	const cols = "c.id, c.content_hash, c.text, c.tokens, c.embedding"
	if nReused > 0 {
		// Wrap around: a start past the last reused row finds nothing.
		err := collect(KindReused, "SELECT DISTINCT ON (x.id) x.* FROM unnest($2::bigint[]) AS r(start) CROSS JOIN LATERAL ("+
			"SELECT "+cols+" FROM "+s.tChunks+" c WHERE c.index_name = $1 AND c.vector_hash IS NOT NULL AND c.vector_hash <> c.content_hash"+
			" AND c.id >= r.start ORDER BY c.id LIMIT 1) x", s.index, starts(nReused))
		if err != nil {
			return nil, err
		}
		// Few reused rows: the random starts found some twice, so take them
		// in order (the dedup above keeps each once).
		if countKind(out, KindReused) < nReused {
			err := collect(KindReused, "SELECT "+cols+" FROM "+s.tChunks+" c WHERE c.index_name = $1 AND c.vector_hash IS NOT NULL"+
				" AND c.vector_hash <> c.content_hash ORDER BY c.id LIMIT $2", s.index, nReused)
			if err != nil {
				return nil, err
			}
		}
	}
	if nCached > 0 {
		err := collect(KindCached, "SELECT "+cols+" FROM (SELECT content_hash FROM "+s.tCache+
			" WHERE model = $2 AND dimensions = $3 ORDER BY created_at LIMIT $4) e"+
			" CROSS JOIN LATERAL (SELECT "+cols+" FROM "+s.tChunks+" c WHERE c.index_name = $1"+
			" AND coalesce(c.vector_hash, c.content_hash) = e.content_hash AND c.content_hash = e.content_hash LIMIT 1) c"+
			" ORDER BY random() LIMIT $5", s.index, s.model, s.dims, 10*nCached, nCached)
		if err != nil {
			return nil, err
		}
	}
	if nUniform > 0 {
		err := collect(KindUniform, "SELECT DISTINCT ON (x.id) x.* FROM unnest($2::bigint[]) AS r(start) CROSS JOIN LATERAL ("+
			"SELECT "+cols+" FROM "+s.tChunks+" c WHERE c.index_name = $1 AND c.id >= r.start ORDER BY c.id LIMIT 1) x",
			s.index, starts(nUniform))
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func countKind(ss []sampled, kind string) int {
	n := 0
	for _, s := range ss {
		if s.kind == kind {
			n++
		}
	}
	return n
}

// saveSamples records the measurements (the last one per chunk wins).
func (s *store) saveSamples(ctx context.Context, ms []Measurement, bound float64) error {
	b := &pgx.Batch{}
	for _, m := range ms {
		b.Queue("INSERT INTO "+s.tSamples+" (index_name, chunk_id, content_hash, kind, cosine_distance, l2, past_bound, measured_at)"+
			" VALUES ($1, $2, $3, $4, $5, $6, $7, now()) ON CONFLICT (index_name, chunk_id) DO UPDATE SET"+
			" content_hash = excluded.content_hash, kind = excluded.kind, cosine_distance = excluded.cosine_distance,"+
			" l2 = excluded.l2, past_bound = excluded.past_bound, measured_at = excluded.measured_at",
			s.index, m.ChunkID, m.ContentHash, m.Kind, m.Cosine, m.L2, m.Cosine > bound)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %d samples of %s: %w", len(ms), s.index, err)
	}
	return nil
}
