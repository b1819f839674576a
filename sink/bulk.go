package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// bulkLoad is the buffer of a Store opened in Bulk mode, into an index
// that was empty when it began: the index's HNSW index is dropped,
// buffered documents are written with COPY at each Flush, and Finish
// builds the HNSW index once over every row, which is several times faster
// than maintaining it insert by insert (`make bench-bulk`). Upsert only
// buffers: the caller must Flush before it acknowledges the work. A
// document that exists when it is flushed (a streamed change got there
// first) goes through the normal, version-fenced Upsert instead. Reads
// (Document, StoredChunks, Lookup) see the buffered documents. Safe for
// concurrent use.
type bulkLoad struct {
	s *Store

	mu   sync.Mutex
	buf  []Document
	vecs map[string][]float32 // buffered vectors by cache key, so in-run repeats are not re-embedded
	// models is the reported model version of buffered vectors, by cache
	// key (absent: unknown).
	models map[string]string
	// pending is the newest buffered version of each document not yet
	// flushed, which the reads see.
	pending map[string]Document
}

// BuildOptions tune Finish's HNSW build.
type BuildOptions struct {
	// MaintenanceWorkMem is the build's maintenance_work_mem: a graph that
	// fits builds much faster. Defaults to "512MB".
	MaintenanceWorkMem string
	// ParallelWorkers is max_parallel_maintenance_workers for the build
	// (pgvector ≥ 0.6 builds HNSW in parallel). Defaults to 2.
	ParallelWorkers int
}

// ErrNotEmpty is beginBulk's answer when the index already holds
// documents: the bulk path is for a first load only.
var ErrNotEmpty = errors.New("index is not empty")

// beginBulk starts a bulk load. It returns ErrNotEmpty when the index has
// documents (deleted ones count: their versions fence).
func (s *Store) beginBulk(ctx context.Context) (*bulkLoad, error) {
	var any bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.tDocs+" WHERE index_name = $1)", s.cfg.Index).Scan(&any); err != nil {
		return nil, fmt.Errorf("begin bulk load: %w", err)
	}
	if any {
		return nil, ErrNotEmpty
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockDDL(ctx, tx, s.cfg.Schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DROP INDEX IF EXISTS "+pgx.Identifier{s.cfg.Schema, s.hnswIndexName()}.Sanitize())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("begin bulk load: drop HNSW index: %w", err)
	}
	return &bulkLoad{s: s, vecs: map[string][]float32{}, models: map[string]string{}, pending: map[string]Document{}}, nil
}

// upsert writes d's new vectors to the embedding cache at once, as the
// streaming path does, and buffers d (checked by Upsert); Flush writes it.
// Caching before the page is flushed is what makes a killed load cheap to
// resume: the re-read page finds its vectors in the cache, so a kill costs
// at most the embedding requests in flight.
func (b *bulkLoad) upsert(ctx context.Context, d Document) (Outcome, error) {
	if d.MetadataOnly {
		// A buffered load writes whole documents (COPY), never a row in
		// place: the caller writes the document the usual way.
		return Outcome{TextChanged: true}, nil
	}
	var hashes, texts []string
	var vecs [][]float32
	cached := make(map[string]bool, len(d.Chunks))
	for _, c := range d.Chunks {
		if c.Vector != nil && c.VectorHash == "" && !cached[c.Hash] {
			cached[c.Hash] = true
			hashes, texts, vecs = append(hashes, c.Hash), append(texts, c.Text), append(vecs, c.Vector)
		}
	}
	if err := b.s.CacheVectors(ctx, hashes, texts, vecs, d.Provenance.ModelVersion); err != nil {
		return Outcome{}, fmt.Errorf("upsert %s: %w", d.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, d)
	if cur, ok := b.pending[d.ID]; !ok || cur.Version.Compare(d.Version) < 0 {
		b.pending[d.ID] = d
	}
	for _, c := range d.Chunks {
		if c.Vector != nil {
			b.vecs[c.vectorKey()] = c.Vector
			if m := d.Provenance.ModelVersion; m != "" {
				b.models[c.vectorKey()] = m
			}
		}
	}
	return Outcome{Applied: true, Inserted: len(d.Chunks)}, nil
}

// buffered is the newest buffered version of document id not yet
// flushed.
func (b *bulkLoad) buffered(id string) (Document, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.pending[id]
	return d, ok
}

// bufferedVectors adds the buffered vectors among hashes to got.
func (b *bulkLoad) bufferedVectors(hashes []string, got map[string][]float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hashes {
		if v, ok := b.vecs[h]; ok {
			got[h] = v
		}
	}
}

// bufferedCached adds the hashes among hashes that have a buffered vector
// to got.
func (b *bulkLoad) bufferedCached(hashes []string, got map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hashes {
		if _, ok := b.vecs[h]; ok {
			got[h] = true
		}
	}
}

// newer says whether the buffered d is what a read of its document sees:
// the index has no document of its id, or an older version of it.
func newer(d Document, stored StoredDocument, found bool) bool {
	return !found || stored.Version.Compare(d.Version) < 0
}

// storedDocument is buffered document d as Document reads it.
func storedDocument(d Document) StoredDocument {
	cs := sortedChunks(d.Chunks)
	hashes := make([]string, len(cs))
	for i, c := range cs {
		hashes[i] = c.Hash
	}
	return StoredDocument{ID: d.ID, Table: d.Table, Key: d.Key, Version: d.Version, SourceTS: d.SourceTS,
		Metadata: d.Metadata, Tenant: d.Tenant, Row: d.Row, Hashes: hashes, RenderHash: d.RenderHash}
}

// fence is buffered document d as Lookup reads it (see Lookup.Doc).
func fence(d Document) StoredDocument {
	return StoredDocument{ID: d.ID, Table: d.Table, Key: d.Key, Version: d.Version, SourceTS: d.SourceTS, RenderHash: d.RenderHash}
}

// storedChunks are buffered document d's chunks as StoredChunks reads
// them: every vector is cached (upsert cached the new ones; a chunk
// without a vector took a cached one).
func storedChunks(d Document) []StoredChunk {
	cs := sortedChunks(d.Chunks)
	out := make([]StoredChunk, len(cs))
	for i, c := range cs {
		sc := StoredChunk{Position: c.Position, Hash: c.Hash, Text: c.Text, VectorHash: c.vectorKey(), OriginCached: true}
		if sc.VectorHash == c.Hash {
			sc.OriginText = c.Text
		} else {
			sc.DebtSince, sc.DebtDistance, sc.DebtNewWords = c.DebtSince, c.DebtDistance, c.DebtNewWords
		}
		out[i] = sc
	}
	return out
}

func sortedChunks(cs []Chunk) []Chunk {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b Chunk) int { return a.Position - b.Position })
	return cs
}

// Flush writes the buffered documents, their chunks and new cache entries
// in one transaction with COPY.
func (b *bulkLoad) Flush(ctx context.Context) error {
	// The flush works on its own copy of the buffered vectors its
	// documents use: the pipeline goes on buffering documents (and their
	// vectors) while a flush runs.
	b.mu.Lock()
	docs := b.buf
	b.buf = nil
	vecs := map[string][]float32{}
	models := map[string]string{}
	for _, d := range docs {
		for _, c := range d.Chunks {
			if v, ok := b.vecs[c.vectorKey()]; ok {
				vecs[c.vectorKey()] = v
			}
			if m, ok := b.models[c.vectorKey()]; ok {
				models[c.vectorKey()] = m
			}
		}
	}
	b.mu.Unlock()
	if len(docs) == 0 {
		return nil
	}
	// A document buffered twice keeps its newest version.
	latest := map[string]Document{}
	for _, d := range docs {
		if cur, ok := latest[d.ID]; !ok || cur.Version.Compare(d.Version) < 0 {
			latest[d.ID] = d
		}
	}
	var conflicts []Document
	err := pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		conflicts = conflicts[:0]
		return b.write(ctx, tx, latest, buffered{vecs, models}, &conflicts)
	})
	if err != nil {
		b.mu.Lock()
		b.buf = append(docs, b.buf...) // retried by the next Flush
		b.mu.Unlock()
		return fmt.Errorf("bulk flush of %d documents: %w", len(latest), err)
	}
	// Flushed vectors are in the cache now: keep the buffer small. The
	// conflicts are written before their documents leave pending, so a
	// read never misses them.
	b.mu.Lock()
	for _, d := range docs {
		for _, c := range d.Chunks {
			delete(b.vecs, c.vectorKey())
		}
	}
	b.mu.Unlock()
	for _, d := range conflicts {
		if _, err := b.s.upsertNow(ctx, d.ID, d); err != nil {
			return err
		}
	}
	b.mu.Lock()
	for id, d := range latest {
		if cur, ok := b.pending[id]; ok && cur.Version.Compare(d.Version) <= 0 {
			delete(b.pending, id)
		}
	}
	b.mu.Unlock()
	return nil
}

// buffered is a flush's copy of the buffered vectors its documents use,
// with their reported model versions.
type buffered struct {
	vecs   map[string][]float32
	models map[string]string
}

func (b *bulkLoad) write(ctx context.Context, tx pgx.Tx, docs map[string]Document, bv buffered, conflicts *[]Document) error {
	s, vecs := b.s, bv.vecs
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE ragsync_bulk_docs (LIKE "+s.tDocs+" INCLUDING DEFAULTS) ON COMMIT DROP"); err != nil {
		return err
	}
	ids := make([]string, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"ragsync_bulk_docs"},
		[]string{"index_name", "id", "source_table", "doc_key", "version", "source_ts", "metadata", "tenant", "row", "render_hash"},
		pgx.CopyFromSlice(len(ids), func(i int) ([]any, error) {
			d := docs[ids[i]]
			s.sawTenant(d.Tenant)
			return []any{s.cfg.Index, d.ID, d.Table, d.Key, d.Version.String(), nullTime(d.SourceTS), jsonObject(d.Metadata), nullString(d.Tenant), nullMap(d.Row), nullString(d.RenderHash)}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy documents: %w", err)
	}
	rows, err := tx.Query(ctx, "INSERT INTO "+s.tDocs+" SELECT * FROM ragsync_bulk_docs ON CONFLICT (index_name, id) DO NOTHING RETURNING id")
	if err != nil {
		return fmt.Errorf("insert documents: %w", err)
	}
	inserted := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert documents: %w", err)
	}

	// Vectors the chunks do not carry come from this load or the cache.
	var need []string
	for _, id := range ids {
		for _, c := range docs[id].Chunks {
			if c.Vector == nil && vecs[c.vectorKey()] == nil {
				need = append(need, c.vectorKey())
			}
		}
	}
	cached, cachedModels, err := s.vectorsWithModels(ctx, tx, need)
	if err != nil {
		return err
	}
	type row struct {
		docID string
		c     Chunk
		vec   []float32
		prov  chunkProv
	}
	var chunkRows []row
	newCache := map[string]Chunk{}
	for _, id := range ids {
		d := docs[id]
		if !inserted[id] {
			*conflicts = append(*conflicts, d)
			continue
		}
		pv := provOf(d)
		for _, c := range d.Chunks {
			v := c.Vector
			cp := pv
			if v == nil {
				// The vector's model version is its cache entry's, or
				// that of the buffered document that brought it.
				model := bv.models[c.vectorKey()]
				if v = vecs[c.vectorKey()]; v == nil {
					v, model = cached[c.vectorKey()], cachedModels[c.vectorKey()]
				}
				cp.model = orNull(model)
			}
			if v == nil {
				return fmt.Errorf("%s chunk %d: %w", id, c.Position, ErrMissingVector)
			}
			chunkRows = append(chunkRows, row{id, c, v, cp})
			if c.Vector != nil {
				if _, ok := newCache[c.vectorKey()]; !ok {
					newCache[c.vectorKey()] = c
				}
			}
		}
	}
	// With full text on, the chunks pass through a temporary table so
	// their tsvector (a plain column since migration 00010, which COPY
	// cannot compute) is written with the row, not by a second UPDATE that
	// would write every index entry twice.
	into := pgx.Identifier{s.cfg.Schema, "chunks"}
	if !s.cfg.SkipFullText {
		if _, err := tx.Exec(ctx, "CREATE TEMP TABLE ragsync_bulk_chunks (index_name text, doc_id text, position int,"+
			" content_hash text, vector_hash text, text text, tokens int, embedding vector,"+
			" model_version text, chunker text, source text, source_position text, committed_at timestamptz, trace_id text) ON COMMIT DROP"); err != nil {
			return fmt.Errorf("copy chunks: %w", err)
		}
		into = pgx.Identifier{"ragsync_bulk_chunks"}
	}
	// Straight into chunks, a halfvec index's vectors go to its halfvec
	// column, encoded as halfvec by the client; through the temporary
	// table they are cast by the insert that copies them.
	vecCol, vecVal := "embedding", func(v []float32) any { return pgvector.NewVector(v) }
	if s.cfg.Type == TypeHalfvec && s.cfg.SkipFullText {
		vecCol, vecVal = halfColumn, func(v []float32) any { return pgvector.NewHalfVector(v) }
	}
	_, err = tx.CopyFrom(ctx, into,
		[]string{"index_name", "doc_id", "position", "content_hash", "vector_hash", "text", "tokens", vecCol,
			"model_version", "chunker", "source", "source_position", "committed_at", "trace_id"},
		pgx.CopyFromSlice(len(chunkRows), func(i int) ([]any, error) {
			r := chunkRows[i]
			p := r.prov
			return []any{s.cfg.Index, r.docID, int32(r.c.Position), r.c.Hash, r.c.vectorKey(), r.c.Text, int32(r.c.Tokens), vecVal(r.vec),
				p.model, p.chunker, p.source, p.position, p.committed, p.trace}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy chunks: %w", err)
	}
	if !s.cfg.SkipFullText {
		_, err := tx.Exec(ctx, "INSERT INTO "+s.tChunks+" (index_name, doc_id, position, content_hash, vector_hash, text, tokens, "+s.vecColumn()+", "+provColumns+", tsv)"+
			" SELECT index_name, doc_id, position, content_hash, vector_hash, text, tokens, "+s.storeVec("embedding")+", "+provColumns+", to_tsvector('simple'::regconfig, text) FROM ragsync_bulk_chunks")
		if err != nil {
			return fmt.Errorf("insert chunks: %w", err)
		}
	}
	if len(newCache) == 0 {
		return nil
	}
	entries := make([]cacheEntry, 0, len(newCache))
	for k, c := range newCache {
		e := cacheEntry{hash: k, vec: c.Vector, model: orNull(bv.models[k])}
		if k == c.Hash {
			e.text = &c.Text
		}
		entries = append(entries, e)
	}
	sql, args := s.cacheWrite(entries, false)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("cache vectors: %w", err)
	}
	return nil
}

// build builds the index's HNSW index over every row with opts. The index
// then takes streamed changes the usual way.
func (b *bulkLoad) build(ctx context.Context, opts BuildOptions) error {
	if opts.MaintenanceWorkMem == "" {
		opts.MaintenanceWorkMem = "512MB"
	}
	if opts.ParallelWorkers <= 0 {
		opts.ParallelWorkers = 2
	}
	return pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		// The lock opening an index for writing takes too: a serve starting during the build
		// waits for it, then finds the HNSW index built.
		if err := lockDDL(ctx, tx, b.s.cfg.Schema); err != nil {
			return fmt.Errorf("build HNSW index: %w", err)
		}
		// SET LOCAL: the settings end with the build's transaction.
		if _, err := tx.Exec(ctx, "SELECT set_config('maintenance_work_mem', $1, true), set_config('max_parallel_maintenance_workers', $2, true)",
			opts.MaintenanceWorkMem, fmt.Sprint(opts.ParallelWorkers)); err != nil {
			return fmt.Errorf("build HNSW index: %w (check maintenance_work_mem %q)", err, opts.MaintenanceWorkMem)
		}
		if _, err := tx.Exec(ctx, b.s.hnswDDL()); err != nil {
			return fmt.Errorf("build HNSW index: %w", err)
		}
		return nil
	})
}
