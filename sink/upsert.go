package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgvector/pgvector-go"

	"github.com/ragsync/ragsync/cdc"
)

// docState is the locked stored row of a document.
type docState struct {
	found   bool
	version cdc.Version
	deleted bool
	// renderHash is the stored render hash ("" when NULL).
	renderHash string
}

// Upsert applies d as the new state of its document in one transaction.
// It locks the document's row, so concurrent writes to one document
// serialize. If a newer version is stored, nothing is written (Stale); if
// this version is stored and live, nothing is written (Duplicate);
// otherwise the document row is written (undeleting it) and its chunks are
// diffed by content hash (see Outcome). New vectors also enter the
// embedding cache. Errors wrap the document id; transient ones satisfy
// Retryable, malformed documents ErrInvalidDocument or ErrMissingVector.
//
// The transaction costs two round trips: one batch opens it
// and reads everything the plan needs under the row lock, the other
// writes the plan and commits (a stale or duplicate change rolls back
// instead).
//
// In Bulk mode Upsert caches d's new vectors and buffers d until Flush
// (see Mode); in Read mode it fails with ErrReadOnly.
func (s *Store) Upsert(ctx context.Context, d Document) (Outcome, error) {
	id := d.ID
	if id == "" {
		id = DocID(d.Table, d.Key)
	}
	if err := s.writable(); err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", id, err)
	}
	if err := s.checkDocument(id, d); err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", id, err)
	}
	if b := s.bulk.Load(); b != nil {
		d.ID = id
		return b.upsert(ctx, d)
	}
	return s.upsertNow(ctx, id, d)
}

// upsertNow writes checked document d in a transaction, its own or one
// shared with concurrent Upserts.
func (s *Store) upsertNow(ctx context.Context, id string, d Document) (Outcome, error) {
	if s.group != nil {
		return s.upsertGrouped(ctx, id, d)
	}
	return s.upsertAlone(ctx, id, d)
}

// upsertAlone writes one document in a transaction of its own.
func (s *Store) upsertAlone(ctx context.Context, id string, d Document) (Outcome, error) {
	var out Outcome
	var err error
	for attempt := 0; ; attempt++ {
		out, err = s.upsertOnce(ctx, id, d)
		// A concurrent writer created the document between our read and
		// our INSERT: its commit released the row, so a new transaction
		// fences against it. Bounded, though one retry always suffices
		// (the row then exists and is locked, not inserted).
		if attempt < 3 && isConstraint(err, "23505", "documents_pkey") {
			continue
		}
		break
	}
	return s.finishUpsert(id, d, out, err)
}

// finishUpsert is Upsert's result for a committed (or failed) write of
// document id: errors wrap the id and are classified, and an edit's
// magnitude is observed once, after commit, so a retried transaction counts
// once.
func (s *Store) finishUpsert(id string, d Document, out Outcome, err error) (Outcome, error) {
	if err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", id, classify(err, s.cfg.Schema))
	}
	if out.edited {
		s.metrics.editSimilarity.WithLabelValues(d.EditMethod).Observe(float64(d.EditSimilarity))
	}
	return out, nil
}

// upsertOnce is one attempt of Upsert on one connection. BEGIN and COMMIT
// travel in the batches (pgx.BeginFunc would cost a round trip each), so
// the connection's transaction status is checked on the way out: whatever
// failed, a transaction left open is rolled back before the connection
// returns to the pool.
func (s *Store) upsertOnce(ctx context.Context, id string, d Document) (out Outcome, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Outcome{}, err
	}
	defer conn.Release()
	defer rollbackOpen(ctx, conn.Conn(), &err)

	rd, err := s.readForUpsert(ctx, conn, id, d)
	if err != nil {
		return Outcome{}, err
	}
	w, out, err := s.decide(ctx, conn, id, d, rd)
	if err != nil || w == nil {
		return out, err
	}
	b := &pgx.Batch{}
	s.queueGiven(b, w.queue(s, b))
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return Outcome{}, fmt.Errorf("write document: %w", err)
	}
	return w.outcome(), nil
}

// write is what one document's upsert writes, decided under its row lock.
type write struct {
	id    string
	d     Document
	found bool
	plan  chunkPlan
}

// decide compares d with what readForUpsert read under the row lock: a
// stale or duplicate change writes nothing (nil write, its Outcome), any
// other gets its chunk plan, whose cached vectors are checked (and locked)
// on conn.
func (s *Store) decide(ctx context.Context, conn batcher, id string, d Document, rd upsertRead) (*write, Outcome, error) {
	var stored []storedChunk
	if !rd.doc.found {
		if rd.fenced {
			return nil, Outcome{Stale: true}, nil
		}
	} else {
		// Equal position-less versions are a tie the source cannot break:
		// the later arrival wins, so no edit is dropped (a replay rewrites
		// the same chunk hashes, which changes nothing).
		switch c := d.Version.Compare(rd.doc.version); {
		case c < 0 && d.Version.Regressed(rd.doc.version):
			return nil, Outcome{}, &cdc.RegressedError{ID: id, Change: d.Version, Stored: rd.doc.version}
		case c < 0:
			return nil, Outcome{Stale: true}, nil
		case c == 0 && !rd.doc.deleted && d.Version.Positional():
			return nil, Outcome{Duplicate: true}, nil
		}
		stored = rd.chunks
	}
	if d.MetadataOnly {
		// The text the caller compared may have changed since (another
		// writer of this document): only what the lock shows decides.
		if !rd.doc.found || rd.doc.deleted || rd.doc.renderHash != d.RenderHash {
			return nil, Outcome{TextChanged: true}, nil
		}
		return &write{id: id, d: d, found: true}, Outcome{}, nil
	}
	w := &write{id: id, d: d, found: rd.doc.found, plan: planChunks(stored, d.Chunks)}
	if err := s.checkVectors(ctx, conn, w.plan.inserts, rd); err != nil {
		return nil, Outcome{}, err
	}
	return w, Outcome{}, nil
}

// queue queues the document row's write and the chunk plan's, and returns
// the chunks that carry their vectors for queueGiven.
func (w *write) queue(s *Store, b *pgx.Batch) []docChunk {
	if w.d.MetadataOnly {
		s.queueMetadata(b, w.id, w.d)
		return nil
	}
	if w.found {
		s.queueUpdateDoc(b, w.id, w.d)
	} else {
		s.queueInsertDoc(b, w.id, w.d)
	}
	return docChunks(w.id, w.d, s.queuePlan(b, w.id, w.d, w.plan))
}

// outcome is what the write did once committed.
func (w *write) outcome() Outcome {
	if w.d.MetadataOnly {
		return Outcome{Applied: true, MetadataOnly: true}
	}
	return Outcome{
		edited:    w.found && w.d.EditMethod != "",
		Applied:   true,
		Inserted:  len(w.plan.inserts),
		Moved:     len(w.plan.moves),
		Unchanged: w.plan.unchanged,
		Removed:   len(w.plan.removes),
	}
}

// rollbackOpen rolls back a transaction left open on c, whatever failed,
// before the connection returns to the pool; a failure to roll back
// becomes *err if there is none.
func rollbackOpen(ctx context.Context, c *pgx.Conn, err *error) {
	pc := c.PgConn()
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	// Not ctx: a cancelled caller must still release the row lock.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := pc.Exec(rctx, "ROLLBACK").ReadAll(); rerr != nil && *err == nil {
		*err = fmt.Errorf("roll back: %w", rerr)
	}
}

// upsertRead is what Upsert reads under the document's row lock.
type upsertRead struct {
	doc    docState
	fenced bool // the document is new and a truncate fences it out
	chunks []storedChunk
	// cached holds the vector keys of d's vectorless chunks that the cache
	// has (locked FOR KEY SHARE), sorted; keys of the document's stored
	// chunks were not asked for (see readForUpsert).
	cached []string
	// storedKeys are the vector keys of the stored chunks, sorted.
	storedKeys []string
	// unprobed are the vector keys of d's vectorless chunks that were not
	// asked for because d.StoredKeys holds them, sorted.
	unprobed []string
}

// readForUpsert opens the transaction and, in the same round trip, locks
// the document row, reads the truncate fence (only if the row is absent),
// the stored chunks, and locks the cache rows the new chunks may be
// inserted from. Each statement runs after the lock in the batch, so under
// READ COMMITTED it sees everything a writer that held the lock before us
// committed.
//
// The cache rows of vector keys the document's chunks already carry are
// not locked: such chunks are almost always unchanged or moved, and
// locking a row writes to it. checkVectors asks for them in the rare case
// one is inserted after all (a repeated paragraph).
func (s *Store) readForUpsert(ctx context.Context, conn batcher, id string, d Document) (upsertRead, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	q := s.queueRead(b, id, d, false)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return upsertRead{}, fmt.Errorf("begin: %w", err)
	}
	rd, err := s.scanRead(br, d, q)
	if err != nil {
		return rd, err
	}
	return rd, br.Close()
}

// queuedRead is what scanRead needs to know of the statements queueRead
// queued.
type queuedRead struct {
	need, unprobed []string
	metadataOnly   bool // only the document's lock was queued: no truncate fence, no chunk read
}

// queueRead queues readForUpsert's reads of document id (after BEGIN,
// which the caller queues). grouped says other documents' rows are locked
// already in this transaction: the truncate fence is then read with
// NOWAIT, so a group never waits for a Truncate while holding rows that
// Truncate may lock next (it locks the fence first); a locked fence fails
// the group, whose documents are then written alone (see groupCommit).
func (s *Store) queueRead(b *pgx.Batch, id string, d Document, grouped bool) queuedRead {
	nowait := ""
	if grouped {
		nowait = " NOWAIT"
	}
	var need []string
	for _, c := range d.Chunks {
		if c.Vector == nil {
			need = append(need, c.vectorKey())
		}
	}
	slices.Sort(need) // lock in key order, like every cache writer
	need = slices.Compact(need)
	var unprobed []string
	if len(d.StoredKeys) > 0 && len(need) > 0 {
		expected := make(map[string]bool, len(d.StoredKeys))
		for _, k := range d.StoredKeys {
			expected[k] = true
		}
		kept := need[:0:0]
		for _, k := range need {
			if expected[k] {
				unprobed = append(unprobed, k)
			} else {
				kept = append(kept, k)
			}
		}
		need = kept
	}

	b.Queue("SELECT version, source_ts, deleted_at IS NOT NULL, coalesce(render_hash, '') FROM "+s.tDocs+
		" WHERE index_name = $1 AND id = $2 FOR UPDATE", s.cfg.Index, id)
	if d.MetadataOnly {
		// Only a live stored row is written, so no truncate fence is
		// read, and its chunks stay as they are: neither read nor written.
		return queuedRead{metadataOnly: true}
	}
	// FOR SHARE: a concurrent Truncate of this table waits for us (and
	// then sees our new row), or we wait for it and see its fence. Only
	// for a new document, as before: an existing one is fenced by its
	// own row, and taking this lock after the row lock could deadlock
	// against a Truncate that locks in the other order.
	b.Queue("SELECT t.version FROM "+s.tTruncs+" t"+
		" WHERE t.index_name = $1 AND t.source_table = $2"+
		" AND NOT EXISTS (SELECT 1 FROM "+s.tDocs+" d WHERE d.index_name = $1 AND d.id = $3) FOR SHARE OF t"+nowait,
		s.cfg.Index, d.Table, id)
	b.Queue("SELECT id, position, content_hash, md5(text), coalesce(vector_hash, content_hash) FROM "+s.tChunks+
		" WHERE index_name = $1 AND doc_id = $2", s.cfg.Index, id)
	if len(need) > 0 {
		// Probed and locked per key, in key order (need is sorted): with
		// content_hash = ANY($3) a generic plan scanned every cache entry
		// of the model for each document.
		b.Queue("SELECT x.content_hash FROM unnest($3::text[]) AS h(hash)"+
			" CROSS JOIN LATERAL (SELECT e.content_hash FROM "+s.tCache+" e"+
			" WHERE e.model = $1 AND e.dimensions = $2 AND e.content_hash = h.hash"+
			" AND e.content_hash NOT IN (SELECT coalesce(c.vector_hash, c.content_hash) FROM "+s.tChunks+" c"+
			" WHERE c.index_name = $4 AND c.doc_id = $5) FOR KEY SHARE OF e) x",
			s.cfg.Model, s.cfg.Dimensions, need, s.cfg.Index, id)
	}
	return queuedRead{need: need, unprobed: unprobed}
}

// scanRead reads the results of the statements queueRead queued.
func (s *Store) scanRead(br pgx.BatchResults, d Document, q queuedRead) (upsertRead, error) {
	need := q.need
	rd := upsertRead{unprobed: q.unprobed}
	var v string
	var ts *time.Time
	err := br.QueryRow().Scan(&v, &ts, &rd.doc.deleted, &rd.doc.renderHash)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return rd, fmt.Errorf("lock document: %w", hintMigrate(err, s.cfg.Schema))
	default:
		if rd.doc.version, err = storedVersion(v, ts); err != nil {
			return rd, err
		}
		rd.doc.found = true
	}
	if q.metadataOnly {
		return rd, nil
	}
	var fence string
	err = br.QueryRow().Scan(&fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return rd, fmt.Errorf("read truncate fence: %w", err)
	case !rd.doc.found:
		fv, err := cdc.ParseVersion(fence)
		if err != nil {
			return rd, fmt.Errorf("stored truncate version: %w", err)
		}
		// Only a truncate of the document's own source fences it; a
		// position-less create tied with the truncate arrived after it
		// and wins (cdc.Version.FencedBy).
		rd.fenced = d.Version.FencedBy(fv)
	}
	rows, err := br.Query()
	if err != nil {
		return rd, fmt.Errorf("read chunks: %w", err)
	}
	rd.chunks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedChunk, error) {
		var c storedChunk
		var key string
		err := r.Scan(&c.id, &c.position, &c.hash, &c.textMD5, &key)
		rd.storedKeys = append(rd.storedKeys, key)
		return c, err
	})
	if err != nil {
		return rd, fmt.Errorf("read chunks: %w", err)
	}
	slices.Sort(rd.storedKeys)
	if len(need) > 0 {
		rows, err := br.Query()
		if err != nil {
			return rd, fmt.Errorf("lock cached vectors: %w", err)
		}
		if rd.cached, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return rd, fmt.Errorf("lock cached vectors: %w", err)
		}
		slices.Sort(rd.cached) // SQL does not promise the lateral's order
	}
	return rd, nil
}

// batcher is a connection or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// isConstraint reports a Postgres error of code on constraint name.
func isConstraint(err error, code, name string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code && pgErr.ConstraintName == name
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

// storedVersion parses a stored version. Versions written in the old text form
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
	return v.FencedBy(fv), nil
}

// queueInsertDoc inserts a new document row. No ON CONFLICT: a row a
// concurrent writer created since readForUpsert fails the transaction with
// documents_pkey, and Upsert retries against it.
func (s *Store) queueInsertDoc(b *pgx.Batch, id string, d Document) {
	s.sawTenant(d.Tenant)
	b.Queue("INSERT INTO "+s.tDocs+
		" (index_name, id, source_table, doc_key, version, source_ts, metadata, tenant, row, fuzzy_hash, render_hash)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
		s.cfg.Index, id, d.Table, d.Key, d.Version.String(), nullTime(d.SourceTS),
		jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row), nullString(d.Fuzzy), nullString(d.RenderHash))
}

// queueUpdateDoc rewrites the locked document row.
func (s *Store) queueUpdateDoc(b *pgx.Batch, id string, d Document) {
	s.sawTenant(d.Tenant)
	b.Queue("UPDATE "+s.tDocs+
		" SET source_table = $3, doc_key = $4, version = $5, source_ts = $6, deleted_at = NULL,"+
		" metadata = $7, tenant = $8, row = $9, fuzzy_hash = $10, edit_similarity = $11, edit_method = $12, render_hash = $13, updated_at = now()"+
		" WHERE index_name = $1 AND id = $2",
		s.cfg.Index, id, d.Table, d.Key, d.Version.String(), nullTime(d.SourceTS),
		jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row), nullString(d.Fuzzy), editSimilarity(d), nullString(d.EditMethod),
		nullString(d.RenderHash))
}

// queueMetadata writes a metadata-only update: the live, locked document
// row's version, metadata, tenant and row, in one statement. Its text, and
// so its chunks, its fuzzy hash and its edit measurement, are unchanged.
// Searches read metadata and tenant from the document row, so the chunks
// answer with the new values from the commit on.
func (s *Store) queueMetadata(b *pgx.Batch, id string, d Document) {
	s.sawTenant(d.Tenant)
	b.Queue("UPDATE "+s.tDocs+
		" SET version = $3, source_ts = $4, metadata = $5, tenant = $6, row = $7, updated_at = now()"+
		" WHERE index_name = $1 AND id = $2",
		s.cfg.Index, id, d.Version.String(), nullTime(d.SourceTS),
		jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row))
}

// checkVectors checks that every chunk to insert without a vector has one
// in the embedding cache, locked FOR KEY SHARE (by readForUpsert, or here
// for keys it skipped: the stored chunks' and those d.StoredKeys left
// unprobed) so a concurrent Purge cannot remove it before commit. The
// vectors are not read: queuePlan inserts such chunks with a join on the
// cache, so a large document's vectors never all sit in memory at once.
func (s *Store) checkVectors(ctx context.Context, conn batcher, inserts []Chunk, rd upsertRead) error {
	have := rd.cached
	var late []string
	for _, c := range inserts {
		k := c.vectorKey()
		if c.Vector != nil {
			continue
		}
		if _, ok := slices.BinarySearch(have, k); ok {
			continue
		}
		if _, ok := slices.BinarySearch(rd.storedKeys, k); ok {
			late = append(late, k)
		} else if _, ok := slices.BinarySearch(rd.unprobed, k); ok {
			late = append(late, k)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		late = slices.Compact(late)
		b := &pgx.Batch{}
		b.Queue("SELECT x.content_hash FROM unnest($3::text[]) AS h(hash)"+
			" CROSS JOIN LATERAL (SELECT content_hash FROM "+s.tCache+
			" WHERE model = $1 AND dimensions = $2 AND content_hash = h.hash FOR KEY SHARE) x",
			s.cfg.Model, s.cfg.Dimensions, late)
		br := conn.SendBatch(ctx, b)
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("lock cached vectors: %w", err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("lock cached vectors: %w", err)
		}
		have = slices.Sorted(slices.Values(append(slices.Clone(have), got...)))
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

// queuePlan queues the chunk plan's writes but the inserts of chunks that
// carry their vectors, which it returns for queueGiven. Deletes go first
// and the unique (doc, position) check is deferred to commit, so moves and
// inserts may reuse any position within the transaction.
func (s *Store) queuePlan(b *pgx.Batch, id string, d Document, p chunkPlan) (given []Chunk) {
	if len(p.removes) > 0 {
		b.Queue("DELETE FROM "+s.tChunks+" WHERE id = ANY($1)", p.removes)
	}
	if len(p.moves) > 0 {
		n := len(p.moves)
		ids, pos, toks, texts := make([]int64, n), make([]int32, n), make([]int32, n), make([]string, n)
		for i, m := range p.moves {
			ids[i], pos[i], toks[i], texts[i] = m.id, int32(m.position), int32(m.tokens), m.text
		}
		// The text may change (a reformatting), so its tsvector does.
		b.Queue("UPDATE "+s.tChunks+" AS c SET position = u.position, text = u.text, tokens = u.tokens, tsv = "+s.tsvOf("u.text", "$5")+
			" FROM unnest($1::bigint[], $2::int[], $3::text[], $4::int[]) AS u(id, position, text, tokens)"+
			" WHERE c.id = u.id", ids, pos, texts, toks, !s.cfg.SkipFullText)
	}
	var cached []Chunk
	for _, c := range p.inserts {
		if c.Vector == nil {
			cached = append(cached, c)
		} else {
			given = append(given, c)
		}
	}
	if len(cached) > 0 {
		// Vectors already in the cache (checked and locked by checkVectors)
		// are copied inside Postgres, probed per chunk: a join let a generic
		// plan hash the whole cache (spilling to temporary files) for every
		// document, a cost that grew with the cache.
		n := len(cached)
		pos, toks := make([]int32, n), make([]int32, n)
		hashes, vhashes, texts := make([]string, n), make([]string, n), make([]string, n)
		debt := newDebtColumns(n)
		for i, c := range cached {
			pos[i], toks[i], hashes[i], vhashes[i], texts[i] = int32(c.Position), int32(c.Tokens), c.Hash, c.vectorKey(), c.Text
			debt.set(i, c)
		}
		pv := provOf(d)
		b.Queue("INSERT INTO "+s.tChunks+" (index_name, doc_id, position, content_hash, vector_hash, text, tokens, "+s.vecColumn()+", tsv,"+
			" debt_since, debt_distance, debt_new_words, "+provColumns+")"+
			" SELECT $1, $2, u.position, u.content_hash, u.vector_hash, u.text, u.tokens, "+s.storeVec("e.embedding")+", "+s.tsvOf("u.text", "$10")+
			", "+debtColumnsSQL+", e.model_version, $14, $15, $16, $17, $18"+
			" FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::int[], $11::timestamptz[], $12::real[], $13::boolean[])"+
			" AS u(position, content_hash, vector_hash, text, tokens, debt_since, debt_distance, debt_new_words)"+
			" CROSS JOIN LATERAL (SELECT embedding, model_version FROM "+s.tCache+
			" WHERE model = $8 AND dimensions = $9 AND content_hash = u.vector_hash LIMIT 1) e",
			s.cfg.Index, id, pos, hashes, vhashes, texts, toks, s.cfg.Model, s.cfg.Dimensions, !s.cfg.SkipFullText,
			debt.since, debt.distance, debt.newWords, pv.chunker, pv.source, pv.position, pv.committed, pv.trace)
	}
	return given
}

// docChunk is a chunk with the id of its document and the provenance its
// row records.
type docChunk struct {
	doc  string
	prov chunkProv
	Chunk
}

func docChunks(id string, d Document, cs []Chunk) []docChunk {
	out := make([]docChunk, len(cs))
	pv := provOf(d)
	for i, c := range cs {
		out[i] = docChunk{id, pv, c}
	}
	return out
}

// provColumns are the chunk columns a write's provenance fills, in the
// order chunkProv's values are bound (model_version first).
const provColumns = "model_version, chunker, source, source_position, committed_at, trace_id"

// chunkProv is the provenance a write records on the chunk rows it
// inserts, as bound parameters: nil is NULL, read as unknown.
type chunkProv struct {
	model, chunker, source, position, trace *string
	committed                               *time.Time
}

// provOf is the provenance of document d's write: its Provenance, and the
// source, position and commit time of its version.
func provOf(d Document) chunkProv {
	pv := chunkProv{
		model: orNull(d.Provenance.ModelVersion), chunker: orNull(d.Provenance.Chunker),
		source: orNull(d.Version.Source), position: orNull(d.Version.Position()),
		trace: orNull(d.Provenance.TraceID),
	}
	if d.Version.TS != 0 {
		t := d.Version.Time()
		pv.committed = &t
	}
	return pv
}

// queueGiven inserts chunks that carry their vectors, of one document or
// of a group's (see upsertGroup), in one statement, and caches their
// vectors from the rows the insert returns (cacheInsert, the policy every
// cache writer shares): each vector crosses the wire and is parsed by
// Postgres once, not once per table. A chunk that carries its vector
// carries its own (checkDocument: no reused vector hash beside it), so it
// is cached under its content hash with its text as the origin text; a
// repeated paragraph is cached once, and keys are written in order, as
// every cache writer does: one statement per transaction keeps two
// transactions that add the same new keys from locking them in opposite
// orders.
func (s *Store) queueGiven(b *pgx.Batch, given []docChunk) {
	if len(given) == 0 {
		return
	}
	n := len(given)
	pos, toks := make([]int32, n), make([]int32, n)
	docs, hashes, vhashes, texts := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	vecs := make([]pgvector.Vector, n)
	models, chunkers, sources, positions, traces := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	committed := make([]*time.Time, n)
	for i, c := range given {
		docs[i], pos[i], toks[i], hashes[i], vhashes[i], texts[i] = c.doc, int32(c.Position), int32(c.Tokens), c.Hash, c.vectorKey(), c.Text
		vecs[i] = pgvector.NewVector(c.Vector)
		pv := c.prov
		models[i], chunkers[i], sources[i], positions[i], traces[i], committed[i] = pv.model, pv.chunker, pv.source, pv.position, pv.trace, pv.committed
	}
	const cols = "doc_id, position, content_hash, vector_hash, text, tokens, embedding, model_version, chunker, source, source_position, committed_at, trace_id"
	const params = "unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::int[], $8::vector[]," +
		" $13::text[], $14::text[], $15::text[], $16::text[], $17::timestamptz[], $18::text[]) AS u(" + cols + ")"
	// The cache takes the given full-precision vectors from the
	// parameters, not from what the insert stored: a halfvec index's
	// column holds a rounded copy. The insert runs whether or not its
	// rows are read.
	sql := "WITH u AS MATERIALIZED (SELECT * FROM " + params + "), ins AS (INSERT INTO " + s.tChunks +
		" (index_name, doc_id, position, content_hash, vector_hash, text, tokens, " + s.vecColumn() + ", " + provColumns + ", tsv)" +
		" SELECT $1, u.doc_id, u.position, u.content_hash, u.vector_hash, u.text, u.tokens, " + s.storeVec("u.embedding") +
		", u.model_version, u.chunker, u.source, u.source_position, u.committed_at, u.trace_id, " + s.tsvOf("u.text", "$9") + " FROM u) " +
		s.cacheInsert("$10", "$11", "SELECT DISTINCT ON (content_hash) content_hash, embedding, text, model_version FROM u ORDER BY content_hash", "$12", false)
	b.Queue(sql,
		s.cfg.Index, docs, pos, hashes, vhashes, texts, toks, vecs, !s.cfg.SkipFullText,
		s.cfg.Model, s.cfg.Dimensions, cacheTouchEvery.Seconds(),
		models, chunkers, sources, positions, committed, traces)
}

// tsvOf is the SQL of a chunk's tsvector column (migration 00010): the
// text's, when the bool parameter on says full text is on, else NULL. The
// 'simple' configuration is the one the generated column used and
// SearchText queries.
func (s *Store) tsvOf(text, on string) string {
	return "CASE WHEN " + on + "::bool THEN to_tsvector('simple'::regconfig, " + text + ") END"
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
