package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoredChunk is a stored chunk with the origin of its vector, as the
// pipeline's near-duplicate reuse reads it.
type StoredChunk struct {
	Position int
	Hash     string
	Text     string
	// VectorHash is the content hash of the text the chunk's vector was
	// computed from: Hash itself, or the origin of a reused vector.
	VectorHash string
	// OriginCached says the cache still holds the vector under VectorHash,
	// so a new chunk may take it (Chunk.VectorHash).
	OriginCached bool
	// OriginText is the text the vector was computed from, as sent to the
	// embedding API; empty if the cache entry is gone or predates
	// migration 00002 (such an origin is never compared). For a chunk
	// whose vector is its own (VectorHash is Hash) it is the chunk's Text:
	// equal content hashes are equal normalised texts, so the cache's
	// copy, which may differ only in layout, is not read again.
	OriginText string
	// DebtSince, DebtDistance and DebtNewWords are the row's reuse debt
	// (see Chunk); DebtSince is zero when the vector is the chunk's own.
	DebtSince    time.Time
	DebtDistance float64
	DebtNewWords bool
}

// StoredChunks returns the chunks stored for document id (see DocID) in
// position order, deleted document or not, with their vectors' origins. A
// document the index has never seen has none. In Bulk mode a buffered
// version newer than the stored one gives its chunks instead.
func (s *Store) StoredChunks(ctx context.Context, id string) ([]StoredChunk, error) {
	if b := s.bulk.Load(); b != nil {
		if pending, ok := b.buffered(id); ok {
			d, found, err := scanFence(s.pool.QueryRow(ctx, s.fenceSQL(), s.cfg.Index, id), id)
			if err != nil {
				return nil, fmt.Errorf("read chunks of %s: %w", id, classify(err, s.cfg.Schema))
			}
			if newer(pending, d, found) {
				return storedChunks(pending), nil
			}
		}
	}
	// The cache is probed per chunk through a LATERAL subquery whose LIMIT
	// keeps the planner from flattening it into a join. As a plain LEFT
	// JOIN, stale statistics (a table that grew from empty since the last
	// ANALYZE, or autovacuum off) made Postgres hash the whole cache on
	// every call: 155 ms per document at 25,000 cache entries, growing
	// with the cache.
	rows, err := s.pool.Query(ctx, s.storedChunksSQL(), s.cfg.Index, id, s.cfg.Model, s.cfg.Dimensions)
	if err != nil {
		return nil, fmt.Errorf("read chunks of %s: %w", id, classify(err, s.cfg.Schema))
	}
	out, err := pgx.CollectRows(rows, scanStoredChunk)
	if err != nil {
		return nil, fmt.Errorf("read chunks of %s: %w", id, err)
	}
	return out, nil
}

func (s *Store) storedChunksSQL() string { return s.storedChunksSQLFor("$2") }

// storedChunksSQLFor is storedChunksSQL for the document whose id is the
// SQL expression doc ($1 the index, $3 and $4 the model and dimensions).
func (s *Store) storedChunksSQLFor(doc string) string {
	// The origin text is NULL for a chunk whose vector is its own and
	// whose cache entry has a text: scanStoredChunk takes the chunk's.
	return "SELECT c.position, c.content_hash, c.text, coalesce(c.vector_hash, c.content_hash)," +
		" e.text IS NOT NULL," +
		" CASE WHEN coalesce(c.vector_hash, c.content_hash) = c.content_hash AND octet_length(e.text) > 0 THEN NULL ELSE coalesce(e.text, '') END," +
		" c.debt_since, coalesce(c.debt_distance, 0), c.debt_new_words" +
		" FROM " + s.tChunks + " c LEFT JOIN LATERAL (SELECT coalesce(x.text, '') AS text FROM " + s.tCache + " x" +
		" WHERE x.model = $3 AND x.dimensions = $4 AND x.content_hash = coalesce(c.vector_hash, c.content_hash) LIMIT 1) e ON true" +
		" WHERE c.index_name = $1 AND c.doc_id = " + doc + " ORDER BY c.position"
}

func scanStoredChunk(r pgx.CollectableRow) (StoredChunk, error) {
	var sc storedChunkScan
	err := r.Scan(sc.dest()...)
	return sc.chunk(), err
}

// storedChunkScan holds one row of storedChunksSQL's columns as scanned.
type storedChunkScan struct {
	c      StoredChunk
	since  *time.Time
	dist   float32
	origin *string
}

func (sc *storedChunkScan) dest() []any {
	c := &sc.c
	return []any{&c.Position, &c.Hash, &c.Text, &c.VectorHash, &c.OriginCached, &sc.origin, &sc.since, &sc.dist, &c.DebtNewWords}
}

func (sc *storedChunkScan) chunk() StoredChunk {
	c := sc.c
	c.OriginText = c.Text
	if sc.origin != nil {
		c.OriginText = *sc.origin
	}
	if sc.since != nil {
		c.DebtSince = *sc.since
	}
	c.DebtDistance = float64(sc.dist)
	return c
}
