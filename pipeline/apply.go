package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// apply applies one change to the sink. It is called for different documents
// concurrently and for one document sequentially.
func (p *Pipeline) apply(ctx context.Context, ch cdc.Change) error {
	op := string(ch.Op)
	// Changes not built by the decoder (a backfill) may leave the version's
	// commit time and snapshot flag to SourceTS and Snapshot.
	ch.Version = ch.FenceVersion()
	switch ch.Op {
	case cdc.OpMessage:
		p.count(op, "skipped")
		return nil
	case cdc.OpTruncate:
		if _, ok := p.table(ch.Table); !ok {
			// Not ours: applying it would delete nothing, yet leave a
			// fence row for a table the index does not hold.
			p.count(op, "unmatched_table")
			return nil
		}
		n, err := p.st.Sink.Truncate(ctx, ch.Table, ch.Version, ch.SourceTS)
		if err == nil && p.st.Observer != nil {
			err = p.st.Observer.Truncated(ctx, ch.Table)
		}
		if err != nil {
			return fmt.Errorf("truncate %s: %w", ch.Table, err)
		}
		p.count(op, "applied")
		p.stats.add("documents_deleted", n)
		return p.shadowTruncate(ctx, ch)
	case cdc.OpDelete:
		if _, ok := p.table(ch.Table); !ok {
			// Not ours: a delete would leave a tombstone row for a
			// document the index never held.
			p.count(op, "unmatched_table")
			return nil
		}
		start := time.Now()
		sctx, span := tracer().Start(ctx, "ragsync.sink.tx")
		sctx, wait := sink.TrackConnWait(sctx)
		out, err := p.st.Sink.Delete(sctx, ch.Table, ch.DocKey, ch.Version, ch.SourceTS)
		if err == nil && !out.Stale && p.st.Observer != nil {
			err = p.st.Observer.Deleted(sctx, DocID(ch))
		}
		endSpan(span, err)
		if err != nil {
			return fmt.Errorf("delete %s: %w", DocID(ch), err)
		}
		p.metrics.observeTx(start, wait)
		p.countOutcome(op, out)
		if out.Applied {
			p.stats.add("documents_deleted", 1)
		}
		if out.Stale {
			// The primary holds a newer change, which reached the
			// shadows or is read by reindex's second pass.
			return nil
		}
		return p.shadowDelete(ctx, ch)
	case cdc.OpCreate, cdc.OpUpdate, cdc.OpRead:
		return p.upsert(ctx, ch)
	default:
		return permanent(fmt.Errorf("unsupported op %q", ch.Op))
	}
}

func (p *Pipeline) upsert(ctx context.Context, ch cdc.Change) error {
	op := string(ch.Op)
	tbl, ok := p.table(ch.Table)
	if !ok {
		p.count(op, "unmatched_table")
		return nil
	}
	id := DocID(ch)
	// Fence before paying for embeddings; the sink fences again inside its
	// transaction, which is what makes concurrent writers safe. With a
	// Lookup stage the fence is read with the chunks and cache after
	// chunking, in one round trip, unless the row needs the stored one to
	// fill its unchanged-TOAST columns.
	early := p.st.Lookup == nil || len(ch.Unavailable) > 0 || ch.After == nil
	var stored sink.StoredDocument
	var found bool
	if early {
		var err error
		if stored, found, err = p.st.Sink.Document(ctx, id); err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		if found && stored.Version.Compare(ch.Version) > 0 {
			if ch.Version.Regressed(stored.Version) {
				return permanent(&cdc.RegressedError{ID: id, Change: ch.Version, Stored: stored.Version})
			}
			p.count(op, "stale")
			return nil
		}
	}
	// refuse returns err for a change that cannot be indexed, unless it is
	// stale: a stale change is skipped whatever its content, as when the
	// fence was read first.
	refuse := func(err error) error {
		if early {
			return err
		}
		stored, found, rerr := p.st.Sink.Document(ctx, id)
		if rerr != nil {
			return fmt.Errorf("read %s: %w", id, rerr)
		}
		if found && stored.Version.Compare(ch.Version) > 0 {
			p.count(op, "stale")
			return nil
		}
		return err
	}
	if !found && ch.After != nil && len(ch.Unavailable) > 0 {
		// Unchanged TOAST columns with no stored row to take them from:
		// indexing the row would drop their text for good.
		return permanent(fmt.Errorf("document %s: column(s) %s arrived as unchanged TOAST values and the index holds no earlier copy of the row to take them from, so it was not indexed without them: "+
			"set REPLICA IDENTITY FULL on the source table (ALTER TABLE … REPLICA IDENTITY FULL) so updates carry them; then `ragsync dlq replay` (the Postgres source reads the row again; behind Kafka, backfill the table first)",
			id, strings.Join(ch.Unavailable, ", ")))
	}
	row := p.mergeUnavailable(ch, stored, found)
	if stripped, n := stripNUL(row); n > 0 {
		// Postgres text and jsonb cannot hold U+0000: every retry would
		// fail the same way (SQLSTATE 22021/22P05). The row is stored and
		// embedded without it; see docs/write-path.md, "Data Postgres cannot hold".
		row = stripped.(map[string]any)
		p.stats.add("nul_stripped", 1)
		p.metrics.nulStripped.Inc()
	}
	if err := p.checkTemplate(ctx, tbl, ch.Table, row); err != nil {
		return refuse(err)
	}
	text := tbl.render(row)
	if len(text) > p.cfg.MaxDocumentBytes {
		p.metrics.tooLarge.Inc()
		return refuse(permanent(fmt.Errorf("document %s: its text is %d bytes, over pipeline.max_document_bytes (%d): "+
			"dead-lettered so it cannot exhaust memory or hold other documents back; raise the limit and replay it with `ragsync dlq replay` to index it",
			id, len(text), p.cfg.MaxDocumentBytes)))
	}
	_, span := tracer().Start(ctx, "ragsync.chunk")
	chunks := p.st.Splitter.Split(text)
	span.End()
	text = "" // the chunks hold the text from here on

	var pre *sink.Lookup
	if !early {
		l, err := p.st.Lookup.Lookup(ctx, id, chunkHashes(chunks))
		if err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		if l.Found && l.Doc.Version.Compare(ch.Version) > 0 {
			if ch.Version.Regressed(l.Doc.Version) {
				return permanent(&cdc.RegressedError{ID: id, Change: ch.Version, Stored: l.Doc.Version})
			}
			p.count(op, "stale")
			return nil
		}
		pre = &l
	}
	chunks, err := p.refine(ctx, chunks, pre, stored, found)
	if err != nil {
		return fmt.Errorf("read %s: %w", id, err)
	}

	doc := sink.Document{
		ID:       id,
		Table:    ch.Table,
		Key:      ch.DocKey,
		Version:  ch.Version,
		SourceTS: ch.SourceTS,
		Metadata: tbl.metadata(row),
		Tenant:   tbl.tenant(row),
		Row:      row,
		Chunks:   make([]sink.Chunk, len(chunks)),
	}
	for i, c := range chunks {
		doc.Chunks[i] = sink.Chunk{Position: c.Position, Hash: c.Hash, Text: c.Text, Tokens: c.Tokens}
	}
	ectx, span := tracer().Start(ctx, "ragsync.embed")
	saved, err := p.embedMissing(ectx, &doc, pre)
	endSpan(span, err)
	if err != nil {
		return stageError{StageEmbedder, fmt.Errorf("embed %s: %w", id, err)}
	}
	start := time.Now()
	sctx, span := tracer().Start(ctx, "ragsync.sink.tx")
	sctx, wait := sink.TrackConnWait(sctx)
	out, err := p.observedUpsert(sctx, doc)
	endSpan(span, err)
	if err != nil {
		p.keepVectors(ctx, doc)
		return fmt.Errorf("upsert %s: %w", id, err)
	}
	p.metrics.observeTx(start, wait)
	if !ch.SourceTS.IsZero() && out.Applied {
		p.metrics.lag.WithLabelValues(ch.Table).Set(time.Since(ch.SourceTS).Seconds())
	}
	p.countOutcome(op, out)
	if out.Applied {
		// Only a write that happened used its cached or reused vectors; a
		// stale or duplicate change (a replay) saved nothing.
		p.stats.add("chunks_cached", saved.cached)
		p.stats.add("chunks_reused", saved.reused)
		p.metrics.chunks.WithLabelValues("cached").Add(float64(saved.cached))
		p.metrics.chunks.WithLabelValues("reused").Add(float64(saved.reused))
	}
	p.stats.add("chunks_inserted", out.Inserted)
	p.stats.add("chunks_unchanged", out.Unchanged)
	p.stats.add("chunks_moved", out.Moved)
	p.stats.add("chunks_removed", out.Removed)
	p.metrics.chunks.WithLabelValues("unchanged").Add(float64(out.Unchanged))
	p.metrics.chunks.WithLabelValues("moved").Add(float64(out.Moved))
	p.metrics.chunks.WithLabelValues("removed").Add(float64(out.Removed))
	if out.Stale {
		return nil
	}
	// Applied or Duplicate (a replay after a shadow's transient failure):
	// the shadows get the same document.
	return p.shadowUpsert(ctx, doc)
}

// mergeUnavailable fills the columns Debezium marked as unchanged TOAST (or
// left out of a MongoDB patch) from the stored row, so the placeholder is
// never embedded and unchanged text stays as it was.
func (p *Pipeline) mergeUnavailable(ch cdc.Change, stored sink.StoredDocument, found bool) map[string]any {
	if len(ch.Unavailable) == 0 && ch.After != nil {
		return ch.After
	}
	row := make(map[string]any, len(ch.After)+len(stored.Row))
	if found {
		for k, v := range stored.Row {
			if ch.After == nil || slices.Contains(ch.Unavailable, k) {
				row[k] = v
			}
		}
	} else {
		p.stats.add("unavailable_without_stored_row", 1)
	}
	for k, v := range ch.After {
		row[k] = v
	}
	return row
}

// embedMissing sets the vector of every chunk whose content hash has no
// stored embedding, embedding each distinct text once. Chunks with a stored
// embedding keep a nil vector: the sink takes it from its cache. Before
// embedding, near-duplicate reuse (see ReuseConfig) lets a chunk take a
// stored vector of the same document whose origin text is similar enough,
// by setting VectorHash. It also records the document's ssdeep hash and
// edit magnitude. It returns how many distinct chunks took a cached or
// reused vector, which the caller counts once the sink applied the document.
// pre, when not nil, holds the stored chunks and cached hashes already read.
func (p *Pipeline) embedMissing(ctx context.Context, doc *sink.Document, pre *sink.Lookup) (savedChunks, error) {
	chunks := doc.Chunks
	cfg := p.cfg.Reuse
	var stored []sink.StoredChunk
	var err error
	if pre != nil {
		stored = pre.Chunks
	} else if stored, err = p.st.Sink.StoredChunks(ctx, doc.ID); err != nil {
		return savedChunks{}, err
	}
	measureEdit(stored, doc)
	// The sink need not probe the cache up front for what is stored.
	doc.StoredKeys = nil
	for _, c := range stored {
		doc.StoredKeys = append(doc.StoredKeys, c.VectorHash)
	}
	if len(chunks) == 0 {
		return savedChunks{}, nil
	}
	hashes := distinctHashes(chunks)
	var known map[string]bool
	if pre != nil {
		known = pre.Cached
	} else if known, err = p.cachedHashes(ctx, hashes); err != nil {
		return savedChunks{}, err
	}
	var missing []int
	for i, c := range chunks {
		if _, ok := known[c.Hash]; !ok {
			missing = append(missing, i)
		}
	}
	if !cfg.Disabled && len(missing) > 0 {
		missing = p.planReuse(cfg, stored, doc, missing)
	}
	var texts []string
	var tokens []int
	index := map[string]int{}
	for _, i := range missing {
		c := chunks[i]
		if _, ok := index[c.Hash]; ok {
			continue
		}
		index[c.Hash] = len(texts)
		texts = append(texts, c.Text)
		tokens = append(tokens, c.Tokens)
	}
	reused := map[string]bool{}
	for _, c := range chunks {
		if c.VectorHash != "" {
			reused[c.Hash] = true
		}
	}
	saved := savedChunks{cached: len(hashes) - len(texts) - len(reused), reused: len(reused)}
	if len(texts) == 0 {
		return saved, nil
	}
	hashOf := make([]string, len(texts))
	for h, n := range index {
		hashOf[n] = h
	}
	// Embed in slices of EmbedSliceChunks. With a cache stage and more
	// than one slice, each slice's vectors go to the embedding cache at
	// once and are dropped here: the vectors held stay bounded whatever
	// the document's size, and a failure or restart later re-embeds
	// nothing already paid for (the sink takes cached vectors by hash).
	// A document that fits one slice keeps its vectors on the chunks, and
	// the sink caches them inside the document's own transaction: one
	// round trip and one transaction fewer per document. Its
	// price is that a crash between the embedding and the commit re-embeds
	// at most one slice; a failed transaction caches them (see upsert).
	sliced := p.st.Cache != nil && len(texts) > p.cfg.EmbedSliceChunks
	vecs := make([][]float32, len(texts))
	for lo := 0; lo < len(texts); lo += p.cfg.EmbedSliceChunks {
		hi := min(lo+p.cfg.EmbedSliceChunks, len(texts))
		got, err := p.st.Embedder.EmbedCounted(ctx, texts[lo:hi], tokens[lo:hi])
		if err != nil {
			return savedChunks{}, err
		}
		if len(got) != hi-lo {
			return savedChunks{}, fmt.Errorf("embedder returned %d vectors for %d texts", len(got), hi-lo)
		}
		// Counted here, not after the write: the API call was paid either way.
		p.stats.add("chunks_embedded", hi-lo)
		p.metrics.chunks.WithLabelValues("embedded").Add(float64(hi - lo))
		if sliced {
			if err := p.st.Cache.CacheVectors(ctx, hashOf[lo:hi], texts[lo:hi], got); err != nil {
				return savedChunks{}, err
			}
			continue
		}
		copy(vecs[lo:hi], got)
	}
	if sliced {
		return saved, nil
	}
	for i := range chunks {
		if n, ok := index[chunks[i].Hash]; ok {
			chunks[i].Vector = vecs[n]
		}
	}
	return saved, nil
}

// measureEdit records, for an update, how similar its text is to the
// stored one (chunker.ChunkEditSimilarity): from the chunk diff, so an
// edit's CPU grows with what changed, not with the document. Nothing here
// decides what to embed, so nothing costlier is measured: the document's
// ssdeep hash (for `ragsync dupes`, which hashes the texts stored without
// one) and a whole-text similarity cost a fifth of an edit run's CPU.
func measureEdit(stored []sink.StoredChunk, doc *sink.Document) {
	if len(stored) == 0 {
		return
	}
	old := make([]chunker.Piece, len(stored))
	for i, c := range stored {
		old[i] = chunker.Piece{Hash: c.Hash, Text: c.Text}
	}
	cur := make([]chunker.Piece, len(doc.Chunks))
	for i, c := range doc.Chunks {
		cur[i] = chunker.Piece{Hash: c.Hash, Text: c.Text}
	}
	doc.EditSimilarity, doc.EditMethod = chunker.ChunkEditSimilarity(old, cur), chunker.MethodWords
}

// refine applies the Splitter's refinement to the chunks of an update: a
// version of a live document with stored chunks. A document the index
// does not hold live (a first load, a create, a re-created document) stays
// as Split cut it. A version that rewrites every chunk is refined too: the
// rule keeps no state but the stored hashes, and a version keeping none of
// them looks the same whether it rewrote a page or edited a one-chunk
// document. The stored hashes come from pre (the
// Lookup) or, without one, from the stored document read before chunking.
// Refinement decides from the hashes alone, so a replay, a backfill read
// or a repeated change of an indexed document gives back the chunks it
// has. The Lookup asked the cache about the chunks as Split cut them; the
// pieces new to that question are asked in a second probe rather than
// taken as new, so a piece embedded before (the unchanged pieces of a
// region refined earlier, or a piece of another document) is not embedded
// again: the probe is one round trip, an embedding is an API call and its
// tokens.
func (p *Pipeline) refine(ctx context.Context, chunks []chunker.Chunk, pre *sink.Lookup, stored sink.StoredDocument, found bool) ([]chunker.Chunk, error) {
	keep := map[string]bool{}
	switch {
	case pre != nil && pre.Found && !pre.Doc.Deleted:
		for _, c := range pre.Chunks {
			keep[c.Hash] = true
		}
	case pre == nil && found && !stored.Deleted:
		for _, h := range stored.Hashes {
			keep[h] = true
		}
	}
	if len(keep) == 0 {
		return chunks, nil
	}
	out := p.st.Splitter.Refine(chunks, func(h string) bool { return keep[h] })
	if pre == nil {
		// Without a Lookup, embedMissing asks the cache about every hash.
		return out, nil
	}
	asked := make(map[string]bool, len(chunks))
	for _, c := range chunks {
		asked[c.Hash] = true
	}
	var probe []string
	for _, h := range chunkHashes(out) {
		if !asked[h] {
			probe = append(probe, h)
		}
	}
	if len(probe) == 0 {
		return out, nil
	}
	cached, err := p.cachedHashes(ctx, probe)
	if err != nil {
		return nil, err
	}
	if pre.Cached == nil {
		pre.Cached = make(map[string]bool, len(cached))
	}
	for h := range cached {
		pre.Cached[h] = true
	}
	return out, nil
}

// chunkHashes is distinctHashes of the chunks as Split returns them.
func chunkHashes(chunks []chunker.Chunk) []string {
	return distinct(len(chunks), func(i int) string { return chunks[i].Hash })
}

// distinctHashes returns the chunks' content hashes, each once, in first
// appearance order: linear in the chunks (a repeated paragraph's hash is
// asked for once).
func distinctHashes(chunks []sink.Chunk) []string {
	return distinct(len(chunks), func(i int) string { return chunks[i].Hash })
}

// distinct returns hash(0) … hash(n-1), each once, in first appearance
// order.
func distinct(n int, hash func(i int) string) []string {
	seen := make(map[string]struct{}, n)
	out := make([]string, 0, n)
	for i := range n {
		h := hash(i)
		if _, ok := seen[h]; ok {
			continue
		}
		seen[h] = struct{}{}
		out = append(out, h)
	}
	return out
}

// keepVectors writes the vectors a document carried to the cache after its
// transaction failed, so a retry or replay pays for none of them again, as
// when they were cached ahead of the transaction. Best effort: the
// transaction's error is what the caller reports, and a cache write that
// fails too costs only a re-embedding.
func (p *Pipeline) keepVectors(ctx context.Context, doc sink.Document) {
	if p.st.Cache == nil {
		return
	}
	var hashes, texts []string
	var vecs [][]float32
	for _, c := range doc.Chunks {
		if c.Vector != nil && c.VectorHash == "" {
			hashes, texts, vecs = append(hashes, c.Hash), append(texts, c.Text), append(vecs, c.Vector)
		}
	}
	if len(hashes) > 0 {
		_ = p.st.Cache.CacheVectors(ctx, hashes, texts, vecs)
	}
}

// savedChunks counts a document's distinct chunks that needed no API call:
// cached (content hash embedded before) and reused (near-duplicate).
type savedChunks struct{ cached, reused int }

// checkTemplate counts a row that lacks columns its table's template names,
// warning once per table with the missing names. A row with none of them
// would render to the template's bare text (a lone "#"), so it is refused
// as permanent: dead-lettered with the reason, and past the dead-letter
// guard's limit the pipeline stops, which is what a template that matches
// nothing deserves.
func (p *Pipeline) checkTemplate(ctx context.Context, tbl TableConfig, table string, row map[string]any) error {
	cols := tbl.templateColumns()
	var missing []string
	for _, c := range cols {
		if _, ok := row[c]; !ok && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	p.stats.add("template_missing_columns", 1)
	p.metrics.missingColumns.WithLabelValues(table).Inc()
	if _, seen := p.warned.LoadOrStore(table, true); !seen {
		p.log.WarnContext(ctx, "rows lack columns the tables[].text template names; they render as empty",
			"table", table, "missing_columns", missing, "template", tbl.Text,
			"fix", "name the row's columns in tables[].text (see `ragsync inspect`), or include them in the connector's column list")
	}
	distinct := 0
	for i, c := range cols {
		if !slices.Contains(cols[:i], c) {
			distinct++
		}
	}
	if len(missing) == distinct {
		return permanent(fmt.Errorf("table %s: the row has none of the columns tables[].text names (%v): nothing to index; fix the template", table, missing))
	}
	return nil
}

// stripNUL returns v without U+0000 in any string or map key, and how many
// strings it changed.
func stripNUL(v any) (any, int) {
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) < 0 {
			return v, 0
		}
		return strings.ReplaceAll(v, "\x00", ""), 1
	case map[string]any:
		n := 0
		var out map[string]any
		for k, e := range v {
			e2, m := stripNUL(e)
			k2 := k
			if strings.IndexByte(k, 0) >= 0 {
				k2, m = strings.ReplaceAll(k, "\x00", ""), m+1
			}
			if m > 0 && out == nil {
				out = make(map[string]any, len(v))
				for k0, e0 := range v {
					out[k0] = e0
				}
			}
			if out != nil {
				if k2 != k {
					delete(out, k)
				}
				out[k2] = e2
			}
			n += m
		}
		if out == nil {
			return v, 0
		}
		return out, n
	case []any:
		n := 0
		var out []any
		for i, e := range v {
			e2, m := stripNUL(e)
			if m > 0 && out == nil {
				out = slices.Clone(v)
			}
			if out != nil {
				out[i] = e2
			}
			n += m
		}
		if out == nil {
			return v, 0
		}
		return out, n
	}
	return v, 0
}

// cachedHashes returns the hashes that have a stored vector. With a cache
// stage it does not read the vectors: a large document's would not fit.
func (p *Pipeline) cachedHashes(ctx context.Context, hashes []string) (map[string]bool, error) {
	out := make(map[string]bool, len(hashes))
	if p.st.Cache != nil {
		return p.st.Cache.Cached(ctx, hashes)
	}
	vecs, err := p.st.Sink.Vectors(ctx, hashes)
	for h := range vecs {
		out[h] = true
	}
	return out, err
}

func (p *Pipeline) table(name string) (TableConfig, bool) {
	if len(p.cfg.Tables) == 0 {
		return TableConfig{Match: "*"}, true
	}
	return tableFor(p.cfg.Tables, name)
}

func (p *Pipeline) count(op, outcome string) {
	p.metrics.changes.WithLabelValues(op, outcome).Inc()
	p.stats.add("op_"+op, 1)
	p.stats.add(outcome, 1)
}

func (p *Pipeline) countOutcome(op string, out sink.Outcome) {
	switch {
	case out.Stale:
		p.count(op, "stale")
	case out.Duplicate:
		p.count(op, "duplicate")
	default:
		p.count(op, "applied")
	}
}

// permanentError marks a failure that no retry can fix.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() error   { return e.err }
func (e permanentError) Permanent() bool { return true }

func permanent(err error) error { return permanentError{err} }

// observedUpsert is the Sink's Upsert with the Observer told before the
// write and after the commit (see Observer).
func (p *Pipeline) observedUpsert(ctx context.Context, doc sink.Document) (sink.Outcome, error) {
	o := p.st.Observer
	if o == nil {
		return p.st.Sink.Upsert(ctx, doc)
	}
	if err := o.Upserting(ctx, doc.Tenant, doc.ID); err != nil {
		return sink.Outcome{}, err
	}
	out, err := p.st.Sink.Upsert(ctx, doc)
	if err != nil || out.Stale {
		return out, err
	}
	return out, o.Upserted(ctx, doc.Tenant, doc.ID)
}
