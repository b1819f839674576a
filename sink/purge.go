package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Default retentions of Purge.
const (
	DefaultDocumentRetention = 720 * time.Hour  // 30 days
	DefaultCacheRetention    = 2160 * time.Hour // 90 days
)

// PurgeOptions says what Purge removes.
type PurgeOptions struct {
	// DocumentRetention is how long a soft-deleted document (op=d or a
	// truncate) keeps its row and chunks. Past it, both go, and with them
	// the version fence: a change older than the delete that arrives
	// later than the retention would create the document again. Defaults
	// to DefaultDocumentRetention; negative is invalid.
	DocumentRetention time.Duration
	// CacheRetention is how long an embedding_cache entry survives without
	// being used (read by Vectors or written by Upsert). Entries a chunk
	// row still points at (content or origin hash, in any index) are kept
	// whatever their age. Defaults to DefaultCacheRetention; negative is
	// invalid.
	CacheRetention time.Duration
	// KeepCache skips the cache, for a purge of documents only.
	KeepCache bool
}

// RetainNothing is the retention that purges everything deleted (or
// unused) up to now: a retention of 0 means the default, so "now" is the
// smallest positive duration.
const RetainNothing = time.Nanosecond

// WithDefaults is opts with each retention of 0 set to its default.
func (o PurgeOptions) WithDefaults() PurgeOptions {
	if o.DocumentRetention == 0 {
		o.DocumentRetention = DefaultDocumentRetention
	}
	if o.CacheRetention == 0 {
		o.CacheRetention = DefaultCacheRetention
	}
	return o
}

// Retentions describes the retentions as a purge's summary prints them:
// the document retention, then the cache's ("kept" under KeepCache), each
// "0s" for RetainNothing.
func (o PurgeOptions) Retentions() (documents, cache string) {
	text := func(d time.Duration) string {
		if d <= RetainNothing {
			return "0s"
		}
		return d.String()
	}
	o = o.WithDefaults()
	documents, cache = text(o.DocumentRetention), text(o.CacheRetention)
	if o.KeepCache {
		cache = "kept"
	}
	return documents, cache
}

// PurgeResult counts what Purge removed.
type PurgeResult struct {
	Documents    int64 // soft-deleted documents past the retention
	Chunks       int64 // their chunk rows
	CacheEntries int64 // unused cache entries, for this Store's model and dimensions
}

// Purge removes this index's soft-deleted documents (and their chunks)
// deleted longer than opts.DocumentRetention ago, then the cache entries of
// the Store's model and dimensions unused for longer than
// opts.CacheRetention that no chunk row points at. Cached embeddings of
// purged documents stay until the cache retention, so re-creating a document
// soon after costs no embedding. Each step is its own transaction; Purge is
// safe to run concurrently with writers and with itself, and meant to be
// called periodically by serve and by `ragsync purge`.
func (s *Store) Purge(ctx context.Context, opts PurgeOptions) (PurgeResult, error) {
	if opts.DocumentRetention < 0 || opts.CacheRetention < 0 {
		return PurgeResult{}, fmt.Errorf("purge: %w: retentions must not be negative", ErrInvalidConfig)
	}
	opts = opts.WithDefaults()
	var res PurgeResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Lock the rows first (SKIP LOCKED: a writer undeleting one wins),
		// then count their chunks before the cascade removes them.
		err := tx.QueryRow(ctx, "WITH gone AS ("+
			"DELETE FROM "+s.tDocs+" WHERE (index_name, id) IN ("+
			"SELECT index_name, id FROM "+s.tDocs+" WHERE index_name = $1 AND deleted_at IS NOT NULL"+
			" AND deleted_at < now() - make_interval(secs => $2) FOR UPDATE SKIP LOCKED)"+
			" RETURNING id)"+
			" SELECT (SELECT count(*) FROM gone),"+
			" (SELECT count(*) FROM "+s.tChunks+" c WHERE c.index_name = $1 AND c.doc_id IN (SELECT id FROM gone))",
			s.cfg.Index, opts.DocumentRetention.Seconds()).Scan(&res.Documents, &res.Chunks)
		return err
	})
	if err != nil {
		return PurgeResult{}, fmt.Errorf("purge documents of %s: %w", s.cfg.Index, hintMigrate(err, s.cfg.Schema))
	}
	if opts.KeepCache {
		return res, nil
	}
	tag, err := s.pool.Exec(ctx, "DELETE FROM "+s.tCache+" AS e WHERE (e.model, e.dimensions, e.content_hash) IN ("+
		"SELECT model, dimensions, content_hash FROM "+s.tCache+
		" WHERE model = $1 AND dimensions = $2 AND last_used_at < now() - make_interval(secs => $3)"+
		" FOR UPDATE SKIP LOCKED)"+
		" AND NOT EXISTS (SELECT 1 FROM "+s.tChunks+" c WHERE coalesce(c.vector_hash, c.content_hash) = e.content_hash)",
		s.cfg.Model, s.cfg.Dimensions, opts.CacheRetention.Seconds())
	if err != nil {
		return res, fmt.Errorf("purge cache of %s: %w", s.cfg.Model, err)
	}
	res.CacheEntries = tag.RowsAffected()
	return res, nil
}
