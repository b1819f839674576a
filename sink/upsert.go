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

// docState is the locked stored row of a document.
type docState struct {
	found   bool
	version cdc.Version
	deleted bool
}

// Upsert applies d as the new state of its document in one transaction.
// It locks the document's row, so concurrent writes to one document
// serialize. If a newer version is stored, nothing is written (Stale); if
// this version is stored and live, nothing is written (Duplicate);
// otherwise the document row is written (undeleting it) and its chunks are
// diffed by content hash (see Outcome). New vectors also enter the
// embedding cache. Errors wrap the document id; transient ones satisfy
// Retryable, malformed documents ErrInvalidDocument or ErrMissingVector.
func (s *Store) Upsert(ctx context.Context, d Document) (Outcome, error) {
	id := d.ID
	if id == "" {
		id = DocID(d.Table, d.Key)
	}
	if err := s.checkDocument(id, d); err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", id, err)
	}
	var out Outcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.upsert(ctx, tx, id, d)
		return err
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", id, classify(err, s.cfg.Schema))
	}
	if out.edited {
		// After commit, so a retried transaction counts once.
		s.metrics.editSimilarity.WithLabelValues(d.EditMethod).Observe(float64(d.EditSimilarity))
	}
	return out, nil
}

func (s *Store) upsert(ctx context.Context, tx pgx.Tx, id string, d Document) (Outcome, error) {
	st, err := s.lockDoc(ctx, tx, id)
	if err != nil {
		return Outcome{}, err
	}
	created := false
	if !st.found {
		fenced, err := s.truncated(ctx, tx, d.Table, d.Version)
		if err != nil || fenced {
			return Outcome{Stale: fenced}, err
		}
		created, err = s.insertDoc(ctx, tx, id, d)
		if err != nil {
			return Outcome{}, err
		}
		if !created {
			// A concurrent writer created the row between our SELECT
			// and INSERT; its commit released it to us, so fence against it.
			if st, err = s.lockDoc(ctx, tx, id); err != nil {
				return Outcome{}, err
			}
			if !st.found {
				return Outcome{}, errors.New("document row vanished under a concurrent writer")
			}
		}
	}

	var stored []storedChunk
	if !created {
		// Equal position-less versions are a tie the source cannot break:
		// the later arrival wins, so no edit is dropped (a replay rewrites
		// the same chunk hashes, which changes nothing).
		switch c := d.Version.Compare(st.version); {
		case c < 0:
			return Outcome{Stale: true}, nil
		case c == 0 && !st.deleted && d.Version.Positional():
			return Outcome{Duplicate: true}, nil
		}
		if stored, err = s.updateDoc(ctx, tx, id, d); err != nil {
			return Outcome{}, err
		}
	}

	plan := planChunks(stored, d.Chunks)
	if err := s.fillVectors(ctx, tx, plan.inserts); err != nil {
		return Outcome{}, err
	}
	if err := s.applyPlan(ctx, tx, id, plan); err != nil {
		return Outcome{}, err
	}
	return Outcome{
		edited:    !created && d.EditMethod != "",
		Applied:   true,
		Inserted:  len(plan.inserts),
		Moved:     len(plan.moves),
		Unchanged: plan.unchanged,
		Removed:   len(plan.removes),
	}, nil
}

func (s *Store) lockDoc(ctx context.Context, tx pgx.Tx, id string) (docState, error) {
	var v string
	var ts *time.Time
	var st docState
	err := tx.QueryRow(ctx, "SELECT version, source_ts, deleted_at IS NOT NULL FROM "+s.tDocs+
		" WHERE index_name = $1 AND id = $2 FOR UPDATE", s.cfg.Index, id).Scan(&v, &ts, &st.deleted)
	if errors.Is(err, pgx.ErrNoRows) {
		return docState{}, nil
	}
	if err != nil {
		return docState{}, fmt.Errorf("lock document: %w", hintMigrate(err, s.cfg.Schema))
	}
	if st.version, err = storedVersion(v, ts); err != nil {
		return docState{}, err
	}
	st.found = true
	return st, nil
}

// storedVersion parses a stored version. Versions written before issue 10
// carry no commit time; the row's source_ts is that time, and without it a
// cross-kind comparison could only go by rank (see cdc.Version).
func storedVersion(text string, sourceTS *time.Time) (cdc.Version, error) {
	v, err := cdc.ParseVersion(text)
	if err != nil {
		return cdc.Version{}, fmt.Errorf("stored version: %w", err)
	}
	if v.TS == 0 && sourceTS != nil && sourceTS.UnixMilli() > 0 {
		v.TS = uint64(sourceTS.UnixMilli())
	}
	return v, nil
}

// truncated reports whether a truncate of table at a version ≥ v has been
// applied, which fences out creates of documents the index never saw. A
// position-less create tied with the truncate arrived after it and wins.
func (s *Store) truncated(ctx context.Context, tx pgx.Tx, table string, v cdc.Version) (bool, error) {
	var fence string
	// FOR SHARE: a concurrent Truncate of this table waits for us (and
	// then sees our new row), or we wait for it and see its fence.
	err := tx.QueryRow(ctx, "SELECT version FROM "+s.tTruncs+
		" WHERE index_name = $1 AND source_table = $2 FOR SHARE", s.cfg.Index, table).Scan(&fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read truncate fence: %w", err)
	}
	fv, err := cdc.ParseVersion(fence)
	if err != nil {
		return false, fmt.Errorf("stored truncate version: %w", err)
	}
	c := v.Compare(fv)
	return c < 0 || (c == 0 && v.Positional()), nil
}

func (s *Store) insertDoc(ctx context.Context, tx pgx.Tx, id string, d Document) (bool, error) {
	tag, err := tx.Exec(ctx, "INSERT INTO "+s.tDocs+
		" (index_name, id, source_table, doc_key, version, source_ts, metadata, tenant, row, fuzzy_hash)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (index_name, id) DO NOTHING",
		s.cfg.Index, id, d.Table, d.Key, d.Version.String(), nullTime(d.SourceTS),
		jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row), nullString(d.Fuzzy))
	if err != nil {
		return false, fmt.Errorf("insert document: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// updateDoc writes the document row and reads its stored chunks, in one
// round trip.
func (s *Store) updateDoc(ctx context.Context, tx pgx.Tx, id string, d Document) ([]storedChunk, error) {
	b := &pgx.Batch{}
	b.Queue("UPDATE "+s.tDocs+
		" SET source_table = $3, doc_key = $4, version = $5, source_ts = $6, deleted_at = NULL,"+
		" metadata = $7, tenant = $8, row = $9, fuzzy_hash = $10, edit_similarity = $11, edit_method = $12, updated_at = now()"+
		" WHERE index_name = $1 AND id = $2",
		s.cfg.Index, id, d.Table, d.Key, d.Version.String(), nullTime(d.SourceTS),
		jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row), nullString(d.Fuzzy), editSimilarity(d), nullString(d.EditMethod))
	b.Queue("SELECT id, position, content_hash, md5(text) FROM "+s.tChunks+
		" WHERE index_name = $1 AND doc_id = $2", s.cfg.Index, id)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("update document: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read chunks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedChunk, error) {
		var c storedChunk
		err := r.Scan(&c.id, &c.position, &c.hash, &c.textMD5)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read chunks: %w", err)
	}
	return out, br.Close()
}

// fillVectors checks that every chunk that came without a vector has one in
// the embedding cache, and locks those cache rows (FOR KEY SHARE) so a
// concurrent Purge cannot remove them before commit. The vectors are not
// read: applyPlan inserts such chunks with a join on the cache, so a large
// document's vectors never all sit in memory at once (issue 10).
func (s *Store) fillVectors(ctx context.Context, tx pgx.Tx, inserts []Chunk) error {
	var need []string
	for _, c := range inserts {
		if c.Vector == nil && !slices.Contains(need, c.vectorKey()) {
			need = append(need, c.vectorKey())
		}
	}
	if len(need) == 0 {
		return nil
	}
	slices.Sort(need) // lock in key order, like every cache writer
	rows, err := tx.Query(ctx, "SELECT content_hash FROM "+s.tCache+
		" WHERE model = $1 AND dimensions = $2 AND content_hash = ANY($3) ORDER BY content_hash FOR KEY SHARE",
		s.cfg.Model, s.cfg.Dimensions, need)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, c := range inserts {
		if c.Vector != nil {
			continue
		}
		_, ok := slices.BinarySearch(have, c.vectorKey())
		if !ok && c.VectorHash != "" && c.VectorHash != c.Hash {
			return fmt.Errorf("chunk %d (hash %s, vector hash %s): %w", c.Position, c.Hash, c.VectorHash, ErrOriginGone)
		}
		if !ok {
			return fmt.Errorf("chunk %d (hash %s, vector hash %s): %w", c.Position, c.Hash, c.vectorKey(), ErrMissingVector)
		}
	}
	return nil
}

// applyPlan writes the chunk plan in one round trip. Deletes go first and
// the unique (doc, position) check is deferred to commit, so moves and
// inserts may reuse any position within the transaction.
func (s *Store) applyPlan(ctx context.Context, tx pgx.Tx, id string, p chunkPlan) error {
	b := &pgx.Batch{}
	if len(p.removes) > 0 {
		b.Queue("DELETE FROM "+s.tChunks+" WHERE id = ANY($1)", p.removes)
	}
	if len(p.moves) > 0 {
		n := len(p.moves)
		ids, pos, toks, texts := make([]int64, n), make([]int32, n), make([]int32, n), make([]string, n)
		for i, m := range p.moves {
			ids[i], pos[i], toks[i], texts[i] = m.id, int32(m.position), int32(m.tokens), m.text
		}
		b.Queue("UPDATE "+s.tChunks+" AS c SET position = u.position, text = u.text, tokens = u.tokens"+
			" FROM unnest($1::bigint[], $2::int[], $3::text[], $4::int[]) AS u(id, position, text, tokens)"+
			" WHERE c.id = u.id", ids, pos, texts, toks)
	}
	var given, cached []Chunk
	for _, c := range p.inserts {
		if c.Vector == nil {
			cached = append(cached, c)
		} else {
			given = append(given, c)
		}
	}
	if len(cached) > 0 {
		// Vectors already in the cache (checked and locked by fillVectors)
		// are copied inside Postgres.
		n := len(cached)
		pos, toks := make([]int32, n), make([]int32, n)
		hashes, vhashes, texts := make([]string, n), make([]string, n), make([]string, n)
		for i, c := range cached {
			pos[i], toks[i], hashes[i], vhashes[i], texts[i] = int32(c.Position), int32(c.Tokens), c.Hash, c.vectorKey(), c.Text
		}
		b.Queue("INSERT INTO "+s.tChunks+" (index_name, doc_id, position, content_hash, vector_hash, text, tokens, embedding)"+
			" SELECT $1, $2, u.position, u.content_hash, u.vector_hash, u.text, u.tokens, e.embedding"+
			" FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::int[]) AS u(position, content_hash, vector_hash, text, tokens)"+
			" JOIN "+s.tCache+" e ON e.model = $8 AND e.dimensions = $9 AND e.content_hash = u.vector_hash",
			s.cfg.Index, id, pos, hashes, vhashes, texts, toks, s.cfg.Model, s.cfg.Dimensions)
	}
	if len(given) > 0 {
		n := len(given)
		pos, toks := make([]int32, n), make([]int32, n)
		hashes, vhashes, texts := make([]string, n), make([]string, n), make([]string, n)
		vecs := make([]pgvector.Vector, n)
		for i, c := range given {
			pos[i], toks[i], hashes[i], vhashes[i], texts[i] = int32(c.Position), int32(c.Tokens), c.Hash, c.vectorKey(), c.Text
			vecs[i] = pgvector.NewVector(c.Vector)
		}
		b.Queue("INSERT INTO "+s.tChunks+" (index_name, doc_id, position, content_hash, vector_hash, text, tokens, embedding)"+
			" SELECT $1, $2, u.* FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::int[], $8::vector[])"+
			" AS u(position, content_hash, vector_hash, text, tokens, embedding)",
			s.cfg.Index, id, pos, hashes, vhashes, texts, toks, vecs)

		// Into the cache, once per vector key and in key order: two
		// documents adding the same new paragraphs then lock cache rows in
		// the same order and cannot deadlock. A reused vector is cached
		// under its origin only (never under the new text's hash, which
		// would pass it off as exact), and only a chunk's own vector
		// brings its text as the origin text.
		type entry struct {
			vec  []float32
			text *string
		}
		cache := make(map[string]entry, n)
		for _, c := range given {
			k := c.vectorKey()
			e := cache[k]
			e.vec = c.Vector
			if k == c.Hash && e.text == nil {
				e.text = &c.Text
			}
			cache[k] = e
		}
		keys := make([]string, 0, len(cache))
		for h := range cache {
			keys = append(keys, h)
		}
		slices.Sort(keys)
		cvecs := make([]pgvector.Vector, len(keys))
		ctexts := make([]*string, len(keys))
		for i, h := range keys {
			cvecs[i], ctexts[i] = pgvector.NewVector(cache[h].vec), cache[h].text
		}
		b.Queue("INSERT INTO "+s.tCache+" AS c (model, dimensions, content_hash, embedding, text)"+
			" SELECT $1, $2, u.h, u.e, u.t FROM unnest($3::text[], $4::vector[], $5::text[]) WITH ORDINALITY AS u(h, e, t, n) ORDER BY u.n"+
			" ON CONFLICT (model, dimensions, content_hash) DO UPDATE SET last_used_at = now(), text = coalesce(c.text, excluded.text)",
			s.cfg.Model, s.cfg.Dimensions, keys, cvecs, ctexts)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write chunks: %w", err)
	}
	return nil
}

// editSimilarity is the value of documents.edit_similarity: NULL unless
// the update was measured.
func editSimilarity(d Document) any {
	if d.EditMethod == "" {
		return nil
	}
	return int16(d.EditSimilarity)
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullMap(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

// jsonObject keeps metadata a JSON object, so "@>" filters work on every row.
func jsonObject(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
