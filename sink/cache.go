package sink

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/ragsync/ragsync/chunker"
)

// cacheEntry is one vector for the embedding cache: the key it is cached
// under and, when the vector is that text's own, the text it was computed
// from. A reused vector is cached under its origin's key only and brings
// no text (it would pass the new text off as the origin).
type cacheEntry struct {
	hash string
	vec  []float32
	text *string
	// model is the model name the provider reported for vec; nil: unknown.
	model *string
}

// cacheWrite is the one statement every path writes the embedding cache
// with (CacheVectors, Bulk, RewriteVectors; Upsert runs its cacheInsert on
// the rows its chunk insert returns), so they share one conflict policy:
//
//   - a new key is inserted with its vector and text;
//   - an existing entry keeps its vector: chunks already copied from it stay
//     equal to it, and a vector is never replaced behind a reused chunk's
//     back. The one exception is replace, which only RewriteVectors asks
//     for: a vector re-embedded on purpose (a repair of one found past the
//     fidelity bound, or a repayment of reuse debt) replaces the entry, so
//     the next document with that text does not copy the vector the
//     repair just replaced;
//   - an existing entry without an origin text (cached before texts were
//     kept) gains the text; the reported model version stays the entry's
//     own, since its vector does (a replacement brings its own);
//   - an existing entry's last use is recorded, at most once per
//     cacheTouchEvery like every read's, so a write of a vector that is
//     cached already writes no new row version.
//
// The conflicting row is locked either way (ON CONFLICT DO UPDATE locks it
// even when its WHERE is false), so a concurrent Purge cannot remove it
// before the writer's commit. Entries are deduplicated (the first of a key
// wins) and written in key order, so two writers adding the same keys lock
// them in the same order and cannot deadlock.
func (s *Store) cacheWrite(entries []cacheEntry, replace bool) (string, []any) {
	slices.SortStableFunc(entries, func(a, b cacheEntry) int { return cmp.Compare(a.hash, b.hash) })
	entries = slices.CompactFunc(entries, func(a, b cacheEntry) bool { return a.hash == b.hash })
	keys := make([]string, len(entries))
	vecs := make([]pgvector.Vector, len(entries))
	texts, models := make([]*string, len(entries)), make([]*string, len(entries))
	for i, e := range entries {
		keys[i], vecs[i], texts[i], models[i] = e.hash, pgvector.NewVector(e.vec), e.text, e.model
	}
	args := []any{s.cfg.Model, s.cfg.Dimensions, keys, vecs, texts, models, cacheTouchEvery.Seconds()}
	if replace {
		args = args[:6] // a replacement records its use whatever the last one
	}
	return s.cacheInsert("$1", "$2", "SELECT u.h, u.e, u.t, u.m FROM unnest($3::text[], $4::vector[], $5::text[], $6::text[]) WITH ORDINALITY AS u(h, e, t, m, n) ORDER BY u.n", "$7", replace), args
}

// orNull is s as a nullable text parameter: NULL when empty, which the
// cache's and the chunks' provenance columns read as unknown.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// cacheInsert is cacheWrite's statement over rows (content_hash, embedding,
// text, model_version) that the query rows yields once per key, in key order; model,
// dimensions and touchSecs (cacheTouchEvery in seconds) are parameter
// references. Upsert feeds it the rows its chunk insert returns, so a new
// vector travels to Postgres once (see queuePlan).
func (s *Store) cacheInsert(model, dimensions, rows, touchSecs string, replace bool) string {
	conflict := " ON CONFLICT (model, dimensions, content_hash) DO UPDATE SET last_used_at = now(), text = coalesce(c.text, excluded.text)" +
		" WHERE (c.text IS NULL AND excluded.text IS NOT NULL) OR c.last_used_at < now() - make_interval(secs => " + touchSecs + ")"
	if replace {
		conflict = " ON CONFLICT (model, dimensions, content_hash) DO UPDATE SET embedding = excluded.embedding, text = coalesce(excluded.text, c.text), model_version = excluded.model_version, last_used_at = now()"
	}
	return "INSERT INTO " + s.tCache + " AS c (model, dimensions, content_hash, embedding, text, model_version)" +
		" SELECT " + model + ", " + dimensions + ", r.* FROM (" + rows + ") r" + conflict
}

// CacheVectors writes embeddings to the embedding cache under their content
// hashes (with the text each was computed from), for this store's model and
// dimensions, in its own short transaction. The pipeline calls it for each
// slice of a large document as the vectors arrive, so they are kept even if
// the document's own transaction never commits, and a later Upsert of chunks
// with nil vectors takes them from here. modelVersion is the model name the
// provider reported for them ("" unknown), which chunks copied from these
// entries record. A hash cached already keeps its vector (see cacheWrite
// for the policy every cache writer shares).
func (s *Store) CacheVectors(ctx context.Context, hashes, texts []string, vecs [][]float32, modelVersion string) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("cache vectors: %w", err)
	}
	if len(hashes) != len(vecs) || len(hashes) != len(texts) {
		return fmt.Errorf("cache vectors: %d hashes, %d texts, %d vectors: %w", len(hashes), len(texts), len(vecs), ErrInvalidDocument)
	}
	if len(hashes) == 0 {
		return nil
	}
	entries := make([]cacheEntry, len(hashes))
	for i := range hashes {
		if len(vecs[i]) != s.cfg.Dimensions {
			return fmt.Errorf("cache vectors: vector of %s has %d dimensions, want %d: %w", hashes[i], len(vecs[i]), s.cfg.Dimensions, ErrInvalidDocument)
		}
		entries[i] = cacheEntry{hash: hashes[i], vec: vecs[i], text: &texts[i], model: orNull(modelVersion)}
	}
	sql, args := s.cacheWrite(entries, false)
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("cache %d vectors: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	return nil
}

// CacheTexts is CacheVectors keyed by the texts themselves: each vector is
// cached under chunker.Hash of its text, the content hash the chunker gives
// a chunk of that text. It is for a writer that sees embedded texts without
// their chunks, such as a request coalescer keeping every answer as it
// arrives (see embedder.CoalesceConfig.Keep).
func (s *Store) CacheTexts(ctx context.Context, texts []string, vecs [][]float32, modelVersion string) error {
	hashes := make([]string, len(texts))
	for i, t := range texts {
		hashes[i] = chunker.Hash(t)
	}
	return s.CacheVectors(ctx, hashes, texts, vecs, modelVersion)
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
	rows, err := s.pool.Query(ctx, s.cachedSQL(), s.cachedArgs(hashes)...)
	if err != nil {
		return nil, fmt.Errorf("look up %d hashes in the cache: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	stale, err := collectCached(rows, out)
	if err != nil {
		return nil, fmt.Errorf("look up %d hashes in the cache: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	if err := s.touchStale(ctx, stale); err != nil {
		return nil, err
	}
	if b := s.bulk.Load(); b != nil {
		b.bufferedCached(hashes, out)
	}
	return out, nil
}

// cachedSQL returns which of the hashes $3 (sorted, see cachedArgs) have a
// cached vector, each with whether its last use is older than
// cacheTouchEvery ($4 seconds), so the caller marks only those used
// (touchStale). The cache is probed once per hash, never with
// "content_hash = ANY($3)", which a generic plan turned into a scan of every
// entry of the model (see vectors).
//
// The probe is a plain SELECT: it once marked the entries used in the same
// statement (the UPDATE as a data-modifying WITH query), and planning that
// statement, which Postgres did afresh for every document because the
// array's length changes its custom plan, cost 0.40 ms of Postgres CPU per
// 4 KB document in its Bind (bench/pgcost; 0.05 ms under a generic plan).
// An entry needs its mark at most once per cacheTouchEvery, so the UPDATE
// now runs, in a second statement, only when some entry needs it.
func (s *Store) cachedSQL() string {
	return "SELECT x.content_hash, x.last_used_at < now() - make_interval(secs => $4) FROM unnest($3::text[]) AS h(hash)" +
		" CROSS JOIN LATERAL (SELECT content_hash, last_used_at FROM " + s.tCache +
		" WHERE model = $1 AND dimensions = $2 AND content_hash = h.hash LIMIT 1) x"
}

// collectCached reads cachedSQL's rows into have and returns the hashes
// whose entries need marking used.
func collectCached(rows pgx.Rows, have map[string]bool) (stale []string, err error) {
	var h string
	var old bool
	_, err = pgx.ForEachRow(rows, []any{&h, &old}, func() error {
		have[h] = true
		if old {
			stale = append(stale, h)
		}
		return nil
	})
	return stale, err
}

// touchStale marks the cache entries of hashes used (see touchCache); none:
// no statement.
func (s *Store) touchStale(ctx context.Context, hashes []string) error {
	if len(hashes) == 0 {
		return nil
	}
	if err := s.touchCache(ctx, hashes); err != nil {
		return fmt.Errorf("mark %d cached vectors used: %w", len(hashes), classify(err, s.cfg.Schema))
	}
	return nil
}

func (s *Store) cachedArgs(hashes []string) []any { return s.touchCacheArgs(hashes) }
