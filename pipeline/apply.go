package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// apply applies one change to the target and its shadows. It is called for
// different documents concurrently and for one document sequentially. w,
// when not nil, is the change in the flow, told which stage holds it.
func (p *Pipeline) apply(ctx context.Context, ch cdc.Change, w *work) error {
	switch ch.Op {
	case cdc.OpMessage:
		p.count(string(ch.Op), "skipped")
		return nil
	case cdc.OpTruncate:
		return p.truncate(ctx, ch)
	case cdc.OpDelete:
		return p.delete(ctx, ch)
	case cdc.OpCreate, cdc.OpUpdate, cdc.OpRead:
		return p.upsert(ctx, ch, w)
	default:
		return permanent(fmt.Errorf("unsupported op %q", ch.Op))
	}
}

// upsert renders the change's row and writes the document to the target,
// then to every shadow: as a metadata-only update when its text is the one
// the target holds (see prepare), else cut in chunks, each through write.
func (p *Pipeline) upsert(ctx context.Context, ch cdc.Change, w *work) error {
	op := string(ch.Op)
	tbl, ok := p.table(ch.Table)
	if !ok {
		p.count(op, "unmatched_table")
		return nil
	}
	pr, err := p.prepare(ctx, ch, tbl)
	if err != nil || pr.pre == nil {
		return err
	}
	pr.w = w
	if pr.doc.MetadataOnly {
		if done, err := p.upsertMetadata(ctx, ch, &pr); done || err != nil || pr.pre == nil {
			return err
		}
	}
	out, saved, err := p.write(ctx, p.st.Target, &pr.doc, pr.pre, true, w)
	if err != nil {
		return err
	}
	p.countUpsert(ch, out, saved)
	if out.Stale {
		return nil
	}
	// Applied or Duplicate (a replay after a shadow's transient failure):
	// the shadows get the same document.
	return p.shadowUpsert(ctx, pr)
}

// prepared is a change ready to write: the document (chunked, unless it is
// a metadata-only update), its text, and what the target holds of it. A
// nil pre is a stale change, counted.
type prepared struct {
	doc  sink.Document
	text string
	pre  *sink.Lookup
	// w is the change in the flow (nil: none), for the backlog's stage.
	w *work
}

// upsertMetadata writes a metadata-only update to the target (the
// Observer told, as for any write), then to the shadows. done is false
// when the target's text changed since prepare read it (another writer):
// pr is then chunked and looked up for the usual write.
func (p *Pipeline) upsertMetadata(ctx context.Context, ch cdc.Change, pr *prepared) (done bool, err error) {
	out, err := p.commit(ctx, p.st.Target, pr.doc, true)
	if err != nil {
		return true, err
	}
	if out.TextChanged {
		return false, p.chunk(ctx, ch, pr)
	}
	p.countUpsert(ch, out, savedChunks{})
	if out.Stale {
		return true, nil
	}
	return true, p.shadowUpsert(ctx, *pr)
}

// prepare builds the document a change writes: its row (unchanged-TOAST
// columns filled from the stored one), its text, and what the target holds
// of it. The stored render hash decides: equal to the text's (same text,
// same chunker), the document is a metadata-only update and is not
// chunked; else it is chunked and its stored chunks and cached hashes are
// read (Lookup). An update reads its fence first (Fence, one small read),
// so unchanged text costs no chunking; a create or a snapshot read, which
// is rarely of a document the index holds, reads everything in one round
// trip once chunked, as does an update whose before image renders another
// text. The fence is read before paying for embeddings; the
// sink fences again inside its transaction, which is what makes
// concurrent writers safe.
func (p *Pipeline) prepare(ctx context.Context, ch cdc.Change, tbl TableConfig) (prepared, error) {
	id, ix := DocID(ch), p.st.Target.Index
	// A row with unchanged-TOAST columns needs the stored row before it
	// can be rendered: its fence is read then, with it.
	early := len(ch.Unavailable) > 0 || ch.After == nil
	var stored sink.StoredDocument
	var found, stale bool
	var err error
	if early {
		if stored, found, stale, err = p.readFence(ctx, ch, id, ix.Document); stale || err != nil {
			return prepared{}, err
		}
	}
	row, err := p.row(ch, id, stored, found)
	if err != nil {
		return prepared{}, err
	}
	text, err := p.render(ctx, tbl, ch.Table, id, row)
	if err != nil {
		return prepared{}, p.refuse(ctx, ch, id, early, err)
	}
	pr := prepared{text: text, doc: p.document(ctx, ch, tbl, row, text)}
	if !early && ch.Op == cdc.OpUpdate && !textChanged(ch, tbl, text) {
		if stored, found, stale, err = p.readFence(ctx, ch, id, ix.Fence); stale || err != nil {
			return prepared{}, err
		}
		early = true
	}
	if early && sameText(stored, found, pr.doc.RenderHash) {
		pr.doc.MetadataOnly, pr.pre = true, &sink.Lookup{Doc: stored, Found: true}
		return pr, nil
	}
	return pr, p.chunk(ctx, ch, &pr)
}

// readFence reads document id with read (Index.Document, or Index.Fence
// when the row is not needed) and fences the change against it: stale
// means a later version is stored, and the change was counted.
func (p *Pipeline) readFence(ctx context.Context, ch cdc.Change, id string,
	read func(context.Context, string) (sink.StoredDocument, bool, error)) (sink.StoredDocument, bool, bool, error) {
	stored, found, err := read(ctx, id)
	if err != nil {
		return sink.StoredDocument{}, false, false, fmt.Errorf("read %s: %w", id, err)
	}
	stale, err := p.fenced(ch, id, stored, found)
	return stored, found, stale, err
}

// textChanged says whether the change itself shows its text changed: its
// before image (REPLICA IDENTITY FULL, MySQL's full row image) renders
// another text. Such an update skips the fence read and is chunked at
// once; the one read after chunking still catches a stored text equal to
// the new one (a replay). Without a before image nothing is known.
func textChanged(ch cdc.Change, tbl TableConfig, text string) bool {
	return ch.Before != nil && len(ch.Unavailable) == 0 && tbl.render(ch.Before) != text
}

// sameText says whether the stored document is live and rendered from the
// text (and chunker) whose render hash is hash.
func sameText(stored sink.StoredDocument, found bool, hash string) bool {
	return found && !stored.Deleted && stored.RenderHash != "" && stored.RenderHash == hash
}

// document is the change's document before chunking: identity, version,
// metadata, tenant, row, render hash and the provenance its chunk rows
// record (the model version is the embedder's, set by write).
func (p *Pipeline) document(ctx context.Context, ch cdc.Change, tbl TableConfig, row map[string]any, text string) sink.Document {
	return sink.Document{
		ID: DocID(ch), Table: ch.Table, Key: ch.DocKey, Version: ch.Version, SourceTS: ch.Version.Time(),
		Metadata: tbl.metadata(row), Tenant: tbl.tenant(row), Row: row,
		RenderHash: renderHash(p.fingerprint, text),
		Provenance: sink.Provenance{Chunker: p.fingerprint, TraceID: traceID(ctx)},
	}
}

// chunk cuts pr's text in chunks and reads what the target holds of them:
// the stored chunks and cached hashes in one round trip (Lookup). A stale
// change leaves pr.pre nil. A change found to be a metadata-only update
// after all (a create or snapshot read of a document whose text the index
// holds) is written as one, its chunks dropped.
func (p *Pipeline) chunk(ctx context.Context, ch cdc.Change, pr *prepared) error {
	id, ix := pr.doc.ID, p.st.Target.Index
	_, span := tracer().Start(ctx, "ragsync.chunk")
	chunks := p.st.Splitter.Split(pr.text)
	span.End()
	l, err := ix.Lookup(ctx, id, chunkHashes(chunks))
	if err != nil {
		return fmt.Errorf("read %s: %w", id, err)
	}
	if stale, err := p.fenced(ch, id, l.Doc, l.Found); stale || err != nil {
		pr.pre = nil
		return err
	}
	if !pr.doc.MetadataOnly && sameText(l.Doc, l.Found, pr.doc.RenderHash) {
		pr.doc.MetadataOnly, pr.pre = true, &l
		return nil
	}
	pr.doc.MetadataOnly = false
	if chunks, err = p.refine(ctx, chunks, &l); err != nil {
		return fmt.Errorf("read %s: %w", id, err)
	}
	pr.doc.Chunks, pr.pre = sinkChunks(chunks), &l
	return nil
}

// sinkChunks are the chunker's chunks as a document carries them, without
// vectors.
func sinkChunks(chunks []chunker.Chunk) []sink.Chunk {
	out := make([]sink.Chunk, len(chunks))
	for i, c := range chunks {
		out[i] = sink.Chunk{Position: c.Position, Hash: c.Hash, Text: c.Text, Tokens: c.Tokens}
	}
	return out
}

// fenced reports whether the stored version of id is later than the
// change's, counting the change as stale. A later stored position that
// committed earlier is a regression (a source that moved), refused as
// permanent so a human sees it (see cdc.Version.Regressed).
func (p *Pipeline) fenced(ch cdc.Change, id string, stored sink.StoredDocument, found bool) (bool, error) {
	if !found || stored.Version.Compare(ch.Version) <= 0 {
		return false, nil
	}
	if ch.Version.Regressed(stored.Version) {
		return true, permanent(&cdc.RegressedError{ID: id, Change: ch.Version, Stored: stored.Version})
	}
	p.count(string(ch.Op), "stale")
	return true, nil
}

// refuse returns err for a change that cannot be indexed, unless it is
// stale: a stale change is skipped whatever its content, as when the fence
// was read first (early).
func (p *Pipeline) refuse(ctx context.Context, ch cdc.Change, id string, early bool, err error) error {
	if early {
		return err
	}
	stored, found, rerr := p.st.Target.Index.Document(ctx, id)
	if rerr != nil {
		return fmt.Errorf("read %s: %w", id, rerr)
	}
	if stale, ferr := p.fenced(ch, id, stored, found); stale {
		return ferr
	}
	return err
}

// row is the row a change indexes: its unchanged-TOAST columns taken from
// the stored row, and U+0000 removed.
func (p *Pipeline) row(ch cdc.Change, id string, stored sink.StoredDocument, found bool) (map[string]any, error) {
	if !found && ch.After != nil && len(ch.Unavailable) > 0 {
		// Unchanged TOAST columns with no stored row to take them from:
		// indexing the row would drop their text for good.
		return nil, permanent(fmt.Errorf("document %s: column(s) %s arrived as unchanged TOAST values and the index holds no earlier copy of the row to take them from, so it was not indexed without them: "+
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
	return row, nil
}

// render is the row's text by its table's template, refused when the row
// has none of the template's columns or the text is over
// pipeline.max_document_bytes.
func (p *Pipeline) render(ctx context.Context, tbl TableConfig, table, id string, row map[string]any) (string, error) {
	if err := p.checkTemplate(ctx, tbl, table, row); err != nil {
		return "", err
	}
	text := tbl.render(row)
	if len(text) > p.cfg.MaxDocumentBytes {
		p.metrics.tooLarge.Inc()
		return "", permanent(fmt.Errorf("document %s: its text is %d bytes, over pipeline.max_document_bytes (%d): "+
			"dead-lettered so it cannot exhaust memory or hold other documents back; raise the limit and replay it with `ragsync dlq replay` to index it",
			id, len(text), p.cfg.MaxDocumentBytes))
	}
	return text, nil
}

// countUpsert counts the target's outcome of an upsert.
func (p *Pipeline) countUpsert(ch cdc.Change, out sink.Outcome, saved savedChunks) {
	if ch.Version.TS != 0 && out.Applied {
		p.metrics.lag.WithLabelValues(ch.Table).Set(p.now().Sub(ch.Version.Time()).Seconds())
	}
	p.countOutcome(string(ch.Op), out)
	if out.MetadataOnly {
		// Its text was unchanged: nothing chunked, embedded or written
		// but the document row.
		p.stats.add("metadata_only", 1)
	}
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
}

// refine applies the Splitter's refinement to the chunks of an update: a
// version of a live document with stored chunks. A document the index
// does not hold live (a first load, a create, a re-created document) stays
// as Split cut it. A version that rewrites every chunk is refined too: the
// rule keeps no state but the stored hashes, and a version keeping none of
// them looks the same whether it rewrote a page or edited a one-chunk
// document. Refinement decides from the hashes alone, so a replay, a
// backfill read or a repeated change of an indexed document gives back the
// chunks it has. The Lookup asked the cache about the chunks as Split cut
// them; the pieces new to that question are asked in a second probe rather
// than taken as new, so a piece embedded before (the unchanged pieces of a
// region refined earlier, or a piece of another document) is not embedded
// again: the probe is one round trip, an embedding is an API call and its
// tokens.
func (p *Pipeline) refine(ctx context.Context, chunks []chunker.Chunk, pre *sink.Lookup) ([]chunker.Chunk, error) {
	if !pre.Found || pre.Doc.Deleted || len(pre.Chunks) == 0 {
		return chunks, nil
	}
	keep := make(map[string]bool, len(pre.Chunks))
	for _, c := range pre.Chunks {
		keep[c.Hash] = true
	}
	out := p.st.Splitter.Refine(chunks, func(h string) bool { return keep[h] })
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
	cached, err := p.st.Target.Index.Cached(ctx, probe)
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
// strings it changed. An unchanged value is returned as it is, not copied.
func stripNUL(v any) (any, int) {
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) < 0 {
			return v, 0
		}
		return strings.ReplaceAll(v, "\x00", ""), 1
	case map[string]any:
		return stripMap(v)
	case []any:
		return stripSlice(v)
	}
	return v, 0
}

// stripMap is stripNUL of a map: copied once its first value or key
// changes.
func stripMap(v map[string]any) (any, int) {
	n := 0
	var out map[string]any
	for k, e := range v {
		e2, m := stripNUL(e)
		k2 := k
		if strings.IndexByte(k, 0) >= 0 {
			k2, m = strings.ReplaceAll(k, "\x00", ""), m+1
		}
		if m > 0 && out == nil {
			out = maps.Clone(v)
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
}

// stripSlice is stripNUL of a slice: copied once its first value changes.
func stripSlice(v []any) (any, int) {
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
