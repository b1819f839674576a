package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/ragsync/ragsync/cdc"
)

// StoredDocument is a document as the index holds it.
type StoredDocument struct {
	ID, Table, Key string
	Version        cdc.Version
	SourceTS       time.Time // zero if unknown
	Deleted        bool
	DeletedAt      time.Time // zero unless Deleted
	Metadata       map[string]any
	Tenant         string
	Row            map[string]any
	// Hashes are the content hashes of the stored chunks in position
	// order (also kept while the document is deleted).
	Hashes []string
	// RenderHash is the stored render hash (Document.RenderHash); empty
	// when the row has none (written before render hashes were kept).
	RenderHash string
}

// Stats counts what the index holds.
type Stats struct {
	Documents int64 // live documents
	Deleted   int64 // soft-deleted documents (version fences)
	Chunks    int64 // chunk rows, including those of deleted documents
	// CacheEntries counts cached vectors for this index's model and
	// dimensions (shared with other indexes of the same model and size).
	CacheEntries int64
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Vectors returns the cached vectors among hashes for the Store's model and
// dimensions; hashes with no vector are absent from the map. Callers embed
// only the hashes it does not return. It also marks the returned entries
// used (see Purge's CacheRetention), at most once per cacheTouchEvery per
// entry and skipping rows another transaction holds, so reads neither
// churn the cache table nor wait on writers.
//
// In Bulk mode the vectors of the buffered documents count as cached.
func (s *Store) Vectors(ctx context.Context, hashes []string) (map[string][]float32, error) {
	if len(hashes) == 0 {
		return map[string][]float32{}, nil
	}
	m, err := s.vectors(ctx, s.pool, hashes)
	if b := s.bulk.Load(); b != nil && err == nil {
		defer b.bufferedVectors(hashes, m)
	}
	if err != nil {
		return nil, fmt.Errorf("read vectors of %d hashes: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	if len(m) > 0 {
		if err := s.touchCache(ctx, hashes); err != nil {
			return nil, fmt.Errorf("mark %d cached vectors used: %w", len(m), classify(err, s.cfg.Schema))
		}
	}
	return m, nil
}

// cacheTouchEvery bounds how often a read rewrites a cache entry's
// last_used_at: retention is counted in days, so an hour of slack is free
// and saves a new tuple per read.
const cacheTouchEvery = time.Hour

func (s *Store) touchCache(ctx context.Context, hashes []string) error {
	// Locks in key order with SKIP LOCKED: an entry a writer holds is being
	// touched by that writer anyway.
	// One primary-key probe per hash (see probeCache).
	_, err := s.pool.Exec(ctx, s.touchCacheSQL(), s.touchCacheArgs(hashes)...)
	return err
}

func (s *Store) touchCacheSQL() string {
	return "UPDATE " + s.tCache + " AS c SET last_used_at = now() FROM (" +
		"SELECT x.model, x.dimensions, x.content_hash FROM unnest($3::text[]) WITH ORDINALITY AS h(hash, n)" +
		" CROSS JOIN LATERAL (SELECT model, dimensions, content_hash FROM " + s.tCache +
		" WHERE model = $1 AND dimensions = $2 AND content_hash = h.hash AND last_used_at < now() - make_interval(secs => $4)" +
		" LIMIT 1 FOR UPDATE SKIP LOCKED) x ORDER BY h.n) AS t" +
		" WHERE c.model = t.model AND c.dimensions = t.dimensions AND c.content_hash = t.content_hash"
}

func (s *Store) touchCacheArgs(hashes []string) []any {
	return []any{s.cfg.Model, s.cfg.Dimensions, slices.Sorted(slices.Values(hashes)), cacheTouchEvery.Seconds()}
}

// vectors reads the cached vectors of hashes.
//
// The cache is probed once per hash through a LATERAL subquery (its LIMIT
// keeps the planner from flattening it) instead of "content_hash = ANY($3)":
// under a generic plan, or with statistics older than the cache's growth
// (autovacuum off, or a cache filling faster than autoanalyze runs), Postgres
// put only (model, dimensions) in the index condition and filtered every
// entry of the model: 84 ms per call at 34,000 entries, growing with the
// cache, where the probes take well under a millisecond at any size.
func (s *Store) vectors(ctx context.Context, q querier, hashes []string) (map[string][]float32, error) {
	out, _, err := s.vectorsWithModels(ctx, q, hashes)
	return out, err
}

// vectorsWithModels is vectors with the model version the provider
// reported for each (absent: unknown).
func (s *Store) vectorsWithModels(ctx context.Context, q querier, hashes []string) (map[string][]float32, map[string]string, error) {
	rows, err := q.Query(ctx, "SELECT x.content_hash, x.embedding, x.model_version FROM unnest($3::text[]) AS h(hash)"+
		" CROSS JOIN LATERAL (SELECT content_hash, embedding, model_version FROM "+s.tCache+
		" WHERE model = $1 AND dimensions = $2 AND content_hash = h.hash LIMIT 1) x",
		s.cfg.Model, s.cfg.Dimensions, hashes)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	out := make(map[string][]float32, len(hashes))
	models := map[string]string{}
	for rows.Next() {
		var h string
		var v pgvector.Vector
		var m *string
		if err := rows.Scan(&h, &v, &m); err != nil {
			return nil, nil, err
		}
		out[h] = v.Slice()
		if m != nil {
			models[h] = *m
		}
	}
	return out, models, rows.Err()
}

// Document returns the stored state of document id (see DocID), deleted or
// not; ok is false if the index has never seen it. In Bulk mode a buffered
// version newer than the stored one is returned instead.
func (s *Store) Document(ctx context.Context, id string) (StoredDocument, bool, error) {
	// The buffer is read first: a flush in between leaves the document
	// in the index.
	var pending Document
	var buffered bool
	if b := s.bulk.Load(); b != nil {
		pending, buffered = b.buffered(id)
	}
	// One statement, so the chunk hashes belong to the same snapshot as
	// the row.
	d, ok, err := scanDocument(s.pool.QueryRow(ctx, s.documentsSQL()+" AND d.id = $2", s.cfg.Index, id))
	if err != nil {
		return StoredDocument{}, false, fmt.Errorf("read document %s: %w", id, classify(err, s.cfg.Schema))
	}
	if buffered && newer(pending, d, ok) {
		return storedDocument(pending), true, nil
	}
	return d, ok, nil
}

// scanDocument reads a row of documentsSQL; ok is false when there is
// none.
func scanDocument(row pgx.Row) (StoredDocument, bool, error) {
	var (
		d         StoredDocument
		version   string
		sourceTS  *time.Time
		deletedAt *time.Time
		tenant    *string
	)
	err := row.Scan(&d.ID, &d.Table, &d.Key, &version, &sourceTS, &deletedAt, &d.Metadata, &tenant, &d.Row, &d.Hashes, &d.RenderHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return StoredDocument{}, false, nil
	}
	if err != nil {
		return StoredDocument{}, false, err
	}
	if err := d.setFence(version, sourceTS, deletedAt); err != nil {
		return StoredDocument{}, false, err
	}
	if tenant != nil {
		d.Tenant = *tenant
	}
	return d, true, nil
}

// documentsSQL reads the index's documents with their chunk hashes in
// position order, one statement so the hashes belong to the row's
// snapshot; callers add the rest of the WHERE clause.
func (s *Store) documentsSQL() string {
	return "SELECT d.id, d.source_table, d.doc_key, d.version, d.source_ts, d.deleted_at," +
		" d.metadata, d.tenant, d.row," +
		" array(SELECT c.content_hash FROM " + s.tChunks + " c WHERE c.index_name = d.index_name AND c.doc_id = d.id ORDER BY c.position)," +
		" coalesce(d.render_hash, '')" +
		" FROM " + s.tDocs + " d WHERE d.index_name = $1"
}

// EachDocument calls fn for every document of the index, deleted ones
// too, in id order, each as Document reads it, streaming rows so memory
// stays flat. It stops at the first error fn returns. It is for comparing
// what two indexes hold, as the dual-write tests compare a shadow with its
// primary.
func (s *Store) EachDocument(ctx context.Context, fn func(StoredDocument) error) error {
	rows, err := s.pool.Query(ctx, s.documentsSQL()+" ORDER BY d.id", s.cfg.Index)
	if err != nil {
		return fmt.Errorf("read documents of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	defer rows.Close()
	for rows.Next() {
		d, _, err := scanDocument(rows)
		if err != nil {
			return fmt.Errorf("read documents of %s: %w", s.cfg.Index, err)
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read documents of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	return nil
}

// Stats counts the index's documents, chunks and cached vectors.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.pool.QueryRow(ctx, "SELECT"+
		" (SELECT count(*) FROM "+s.tDocs+" WHERE index_name = $1 AND deleted_at IS NULL),"+
		" (SELECT count(*) FROM "+s.tDocs+" WHERE index_name = $1 AND deleted_at IS NOT NULL),"+
		" (SELECT count(*) FROM "+s.tChunks+" WHERE index_name = $1),"+
		" (SELECT count(*) FROM "+s.tCache+" WHERE model = $2 AND dimensions = $3)",
		s.cfg.Index, s.cfg.Model, s.cfg.Dimensions).Scan(&st.Documents, &st.Deleted, &st.Chunks, &st.CacheEntries)
	if err != nil {
		return Stats{}, fmt.Errorf("stats of index %s: %w", s.cfg.Index, hintMigrate(err, s.cfg.Schema))
	}
	return st, nil
}
