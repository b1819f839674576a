package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
)

// MonitorState is what the monitor keeps and reads of one index: its
// canary baselines, its measurements of stored chunks, its persisted drift
// windows (migration 00007), and samples of the index's chunks. The
// monitor reaches the index tables only through it. Safe for concurrent
// use; it does not own the pool.
type MonitorState struct {
	pool                                                                *pgxpool.Pool
	index, model                                                        string
	dims                                                                int
	tChunks, tCache, tIndexes, tCanaries, tSamples, tWindows, tWinVects string
	// vec is the index's chunk-vector expression (vecExpr over "c"), read
	// from the catalog at first use.
	vec atomic.Pointer[string]
}

// NewMonitorState returns the monitor state of index (embedded with model
// at dims) in schema.
func NewMonitorState(pool *pgxpool.Pool, schema, index, model string, dims int) *MonitorState {
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	return &MonitorState{pool: pool, index: index, model: model, dims: dims,
		tChunks: q("chunks"), tCache: q("embedding_cache"), tIndexes: q("indexes"), tCanaries: q("monitor_canaries"),
		tSamples: q("monitor_samples"), tWindows: q("monitor_windows"), tWinVects: q("monitor_window_vectors")}
}

// Canary is a stored canary baseline.
type Canary struct {
	Hash, Text string
	Vector     []float32
	// TakenBy is the command that took it; empty before it was recorded.
	TakenBy string
	TakenAt time.Time
}

// Canaries reads the index's canary baselines.
func (m *MonitorState) Canaries(ctx context.Context) ([]Canary, error) {
	rows, err := m.pool.Query(ctx, "SELECT text_hash, text, embedding, coalesce(taken_by, ''), created_at FROM "+m.tCanaries+" WHERE index_name = $1", m.index)
	if err != nil {
		return nil, fmt.Errorf("read canaries of %s: %w", m.index, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Canary, error) {
		var c Canary
		var v pgvector.Vector
		err := r.Scan(&c.Hash, &c.Text, &v, &c.TakenBy, &c.TakenAt)
		c.Vector = v.Slice()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read canaries of %s: %w", m.index, err)
	}
	return out, nil
}

// AddCanaries stores baselines taken by by; an existing baseline is kept
// (ResetCanaries forgets them).
func (m *MonitorState) AddCanaries(ctx context.Context, cs []Canary, by string) error {
	b := &pgx.Batch{}
	for _, c := range cs {
		b.Queue("INSERT INTO "+m.tCanaries+" (index_name, text_hash, text, embedding, taken_by) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
			m.index, c.Hash, c.Text, pgvector.NewVector(c.Vector), by)
	}
	if err := m.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d canaries of %s: %w", len(cs), m.index, err)
	}
	return nil
}

// ResetCanaries forgets every baseline of the index.
func (m *MonitorState) ResetCanaries(ctx context.Context) error {
	if _, err := m.pool.Exec(ctx, "DELETE FROM "+m.tCanaries+" WHERE index_name = $1", m.index); err != nil {
		return fmt.Errorf("reset canaries of %s: %w", m.index, err)
	}
	return nil
}

// SampledChunk is a stored chunk picked for re-embedding.
type SampledChunk struct {
	ID     int64
	Hash   string
	Text   string
	Tokens int
	Vector []float32
	// ModelVersion, Chunker and TraceID are the chunk's provenance (see
	// Hit); empty: unknown, written before provenance was recorded.
	ModelVersion, Chunker, TraceID string
}

// ChunkIDRange is the lowest and highest chunk id of the index (0, 0 when
// it has none).
func (m *MonitorState) ChunkIDRange(ctx context.Context) (lo, hi int64, err error) {
	err = m.pool.QueryRow(ctx, "SELECT coalesce(min(id), 0), coalesce(max(id), 0) FROM "+m.tChunks+" WHERE index_name = $1", m.index).Scan(&lo, &hi)
	if err != nil {
		return 0, 0, fmt.Errorf("sample chunks of %s: %w", m.index, err)
	}
	return lo, hi, nil
}

// vecOf is the index's chunk vector, full precision, as every reader of
// it reads it (see Store.vecOf): the index's vector type is read from the
// catalog once.
func (m *MonitorState) vecOf(ctx context.Context) (string, error) {
	if v := m.vec.Load(); v != nil {
		return *v, nil
	}
	var t VectorType
	if err := m.pool.QueryRow(ctx, "SELECT vector_type FROM "+m.tIndexes+" WHERE name = $1", m.index).Scan(&t); err != nil {
		return "", fmt.Errorf("read the vector type of %s: %w", m.index, err)
	}
	v := vecExpr(t, "c")
	m.vec.Store(&v)
	return v, nil
}

// sampleCols are the columns sample scans, over chunks aliased c.
func sampleCols(vec string) string {
	return "c.id, c.content_hash, c.text, c.tokens, " + vec + " AS embedding, c.model_version, c.chunker, c.trace_id"
}

// sample runs the query build makes of sampleCols.
func (m *MonitorState) sample(ctx context.Context, what string, build func(cols string) string, args ...any) ([]SampledChunk, error) {
	vec, err := m.vecOf(ctx)
	if err != nil {
		return nil, fmt.Errorf("sample %s chunks of %s: %w", what, m.index, err)
	}
	rows, err := m.pool.Query(ctx, build(sampleCols(vec)), args...)
	if err != nil {
		return nil, fmt.Errorf("sample %s chunks of %s: %w", what, m.index, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SampledChunk, error) {
		var c SampledChunk
		var v pgvector.Vector
		var version, chunker, trace *string
		err := r.Scan(&c.ID, &c.Hash, &c.Text, &c.Tokens, &v, &version, &chunker, &trace)
		c.Vector = v.Slice()
		c.ModelVersion, c.Chunker, c.TraceID = deref(version), deref(chunker), deref(trace)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("sample %s chunks of %s: %w", what, m.index, err)
	}
	return out, nil
}

// ReusedAt picks, for each start, the first chunk with a reused vector
// (vector_hash ≠ content_hash) at or after that id: one index probe each,
// never a scan. A start past the last such chunk finds nothing.
func (m *MonitorState) ReusedAt(ctx context.Context, starts []int64) ([]SampledChunk, error) {
	return m.sample(ctx, "reused", func(sampleCols string) string {
		return "SELECT DISTINCT ON (x.id) x.* FROM unnest($2::bigint[]) AS r(start) CROSS JOIN LATERAL (" +
			"SELECT " + sampleCols + " FROM " + m.tChunks + " c WHERE c.index_name = $1 AND c.vector_hash IS NOT NULL AND c.vector_hash <> c.content_hash" +
			" AND c.id >= r.start ORDER BY c.id LIMIT 1) x"
	}, m.index, starts)
}

// ReusedFirst takes the first n chunks with a reused vector, by id.
func (m *MonitorState) ReusedFirst(ctx context.Context, n int) ([]SampledChunk, error) {
	return m.sample(ctx, "reused", func(sampleCols string) string {
		return "SELECT " + sampleCols + " FROM " + m.tChunks + " c WHERE c.index_name = $1 AND c.vector_hash IS NOT NULL" +
			" AND c.vector_hash <> c.content_hash ORDER BY c.id LIMIT $2"
	}, m.index, n)
}

// CachedOldest picks n chunks at random among those whose vector is one
// of the 10·n oldest cache entries of the model.
func (m *MonitorState) CachedOldest(ctx context.Context, n int) ([]SampledChunk, error) {
	return m.sample(ctx, "cached", func(sampleCols string) string {
		return "SELECT c.* FROM (SELECT content_hash FROM " + m.tCache +
			" WHERE model = $2 AND dimensions = $3 ORDER BY created_at LIMIT $4) e" +
			" CROSS JOIN LATERAL (SELECT " + sampleCols + " FROM " + m.tChunks + " c WHERE c.index_name = $1" +
			" AND coalesce(c.vector_hash, c.content_hash) = e.content_hash AND c.content_hash = e.content_hash LIMIT 1) c" +
			" ORDER BY random() LIMIT $5"
	}, m.index, m.model, m.dims, 10*n, n)
}

// UniformAt picks, for each start, the first chunk at or after that id.
func (m *MonitorState) UniformAt(ctx context.Context, starts []int64) ([]SampledChunk, error) {
	return m.sample(ctx, "uniform", func(sampleCols string) string {
		return "SELECT DISTINCT ON (x.id) x.* FROM unnest($2::bigint[]) AS r(start) CROSS JOIN LATERAL (" +
			"SELECT " + sampleCols + " FROM " + m.tChunks + " c WHERE c.index_name = $1 AND c.id >= r.start ORDER BY c.id LIMIT 1) x"
	}, m.index, starts)
}

// Sample is one measurement of a stored chunk: its vector against a fresh
// embedding of its text.
type Sample struct {
	ChunkID     int64
	ContentHash string
	Kind        string
	Cosine, L2  float64
	PastBound   bool
}

// SaveSamples records measurements (the last one per chunk wins).
func (m *MonitorState) SaveSamples(ctx context.Context, ss []Sample) error {
	b := &pgx.Batch{}
	for _, s := range ss {
		b.Queue("INSERT INTO "+m.tSamples+" (index_name, chunk_id, content_hash, kind, cosine_distance, l2, past_bound, measured_at)"+
			" VALUES ($1, $2, $3, $4, $5, $6, $7, now()) ON CONFLICT (index_name, chunk_id) DO UPDATE SET"+
			" content_hash = excluded.content_hash, kind = excluded.kind, cosine_distance = excluded.cosine_distance,"+
			" l2 = excluded.l2, past_bound = excluded.past_bound, measured_at = excluded.measured_at",
			m.index, s.ChunkID, s.ContentHash, s.Kind, s.Cosine, s.L2, s.PastBound)
	}
	if err := m.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %d samples of %s: %w", len(ss), m.index, err)
	}
	return nil
}

// Window is a persisted drift window.
type Window struct {
	Seen, LastID int64
	PinnedAt     *time.Time
	Vectors      [][]float32
	// HeaderOnly writes only Seen, LastID and PinnedAt: the stored vectors
	// already are Vectors.
	HeaderOnly bool
}

// LoadWindow reads window name; false when it was never saved.
func (m *MonitorState) LoadWindow(ctx context.Context, name string) (Window, bool, error) {
	var w Window
	err := m.pool.QueryRow(ctx, "SELECT seen, last_chunk_id, pinned_at FROM "+m.tWindows+" WHERE index_name = $1 AND name = $2",
		m.index, name).Scan(&w.Seen, &w.LastID, &w.PinnedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, false, nil
	}
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, m.index, err)
	}
	rows, err := m.pool.Query(ctx, "SELECT embedding FROM "+m.tWinVects+" WHERE index_name = $1 AND name = $2 ORDER BY slot", m.index, name)
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, m.index, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[pgvector.Vector])
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, m.index, err)
	}
	for _, v := range vs {
		w.Vectors = append(w.Vectors, v.Slice())
	}
	return w, true, nil
}

// SaveWindow replaces window name in one transaction.
func (m *MonitorState) SaveWindow(ctx context.Context, name string, w Window) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+m.tWindows+" (index_name, name, seen, last_chunk_id, pinned_at) VALUES ($1, $2, $3, $4, $5)"+
			" ON CONFLICT (index_name, name) DO UPDATE SET seen = excluded.seen, last_chunk_id = excluded.last_chunk_id, pinned_at = excluded.pinned_at",
			m.index, name, w.Seen, w.LastID, w.PinnedAt)
		if err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, m.index, err)
		}
		if w.HeaderOnly {
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+m.tWinVects+" WHERE index_name = $1 AND name = $2 AND slot >= $3", m.index, name, len(w.Vectors)); err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, m.index, err)
		}
		if len(w.Vectors) == 0 {
			return nil
		}
		slots := make([]int32, len(w.Vectors))
		vecs := make([]pgvector.Vector, len(w.Vectors))
		for i, v := range w.Vectors {
			slots[i], vecs[i] = int32(i), pgvector.NewVector(v)
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+m.tWinVects+" (index_name, name, slot, embedding) SELECT $1, $2, u.slot, u.embedding"+
			" FROM unnest($3::int[], $4::vector[]) AS u(slot, embedding)"+
			" ON CONFLICT (index_name, name, slot) DO UPDATE SET embedding = excluded.embedding", m.index, name, slots, vecs)
		if err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, m.index, err)
		}
		return nil
	})
}

// Pins returns when each of names was last pinned, for the pinned ones.
func (m *MonitorState) Pins(ctx context.Context, names []string) (map[string]time.Time, error) {
	rows, err := m.pool.Query(ctx, "SELECT name, pinned_at FROM "+m.tWindows+" WHERE index_name = $1 AND name = ANY($2) AND pinned_at IS NOT NULL",
		m.index, names)
	if err != nil {
		return nil, fmt.Errorf("read drift window pins of %s: %w", m.index, err)
	}
	out := map[string]time.Time{}
	var name string
	var pinned time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &pinned}, func() error { out[name] = pinned; return nil }); err != nil {
		return nil, fmt.Errorf("read drift window pins of %s: %w", m.index, err)
	}
	return out, nil
}

// ChunkVectors reads up to n chunk vectors with id > after, in id order;
// newest takes the last n instead of the first.
func (m *MonitorState) ChunkVectors(ctx context.Context, after int64, n int, newest bool) ([]int64, [][]float32, error) {
	order := "ASC"
	if newest {
		order = "DESC"
	}
	vec, err := m.vecOf(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read new chunk vectors of %s: %w", m.index, err)
	}
	rows, err := m.pool.Query(ctx, "SELECT c.id, "+vec+" FROM "+m.tChunks+" c WHERE c.index_name = $1 AND c.id > $2 ORDER BY c.id "+order+" LIMIT $3",
		m.index, after, n)
	if err != nil {
		return nil, nil, fmt.Errorf("read new chunk vectors of %s: %w", m.index, err)
	}
	type idVec struct {
		id int64
		v  pgvector.Vector
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idVec, error) {
		var x idVec
		return x, r.Scan(&x.id, &x.v)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read new chunk vectors of %s: %w", m.index, err)
	}
	ids := make([]int64, len(got))
	vecs := make([][]float32, len(got))
	for i, x := range got {
		ids[i], vecs[i] = x.id, x.v.Slice()
	}
	if newest {
		slices.Reverse(ids)
		slices.Reverse(vecs)
	}
	return ids, vecs, nil
}

// RandomVectors reads n chunk vectors picked at random (one scan of the
// index's chunks: for manual commands) and the highest chunk id.
func (m *MonitorState) RandomVectors(ctx context.Context, n int) ([][]float32, int64, error) {
	vec, err := m.vecOf(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("sample chunk vectors of %s: %w", m.index, err)
	}
	rows, err := m.pool.Query(ctx, "SELECT "+vec+" FROM "+m.tChunks+" c WHERE c.index_name = $1 ORDER BY random() LIMIT $2", m.index, n)
	if err != nil {
		return nil, 0, fmt.Errorf("sample chunk vectors of %s: %w", m.index, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[pgvector.Vector])
	if err != nil {
		return nil, 0, fmt.Errorf("sample chunk vectors of %s: %w", m.index, err)
	}
	vecs := make([][]float32, len(vs))
	for i, v := range vs {
		vecs[i] = v.Slice()
	}
	var maxID int64
	if err := m.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+m.tChunks+" WHERE index_name = $1", m.index).Scan(&maxID); err != nil {
		return nil, 0, fmt.Errorf("sample chunk vectors of %s: %w", m.index, err)
	}
	return vecs, maxID, nil
}
