package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// The write path every target takes, the primary and each shadow alike:
// plan (which chunks the target's cache lacks, and, for the primary,
// which may reuse a near-duplicate's vector), embed (in slices, each cached
// as it arrives when there is more than one), write (one transaction).

// write embeds what t lacks of doc and writes doc to t. primary marks the
// pipeline's own target: it alone measures edits, reuses near-duplicate
// vectors (whose debt is repaid in that index) and tells the Observer.
// pre is what t holds of the document (Index.Lookup). w, when not nil, is
// the change in the flow, marked as held by the provider while embedding.
func (p *Pipeline) write(ctx context.Context, t Target, doc *sink.Document, pre *sink.Lookup, primary bool, w *work) (sink.Outcome, savedChunks, error) {
	ectx, span := tracer().Start(ctx, "ragsync.embed")
	saved, err := p.embedMissing(ectx, t, doc, pre, primary, w)
	endSpan(span, err)
	if err != nil {
		return sink.Outcome{}, savedChunks{}, stageError{StageEmbedder, fmt.Errorf("embed %s: %w", doc.ID, err)}
	}
	// The vectors this write embedded are the model's the provider named
	// in its last answer (a vector taken from the cache records its own).
	doc.Provenance.ModelVersion = t.Embedder.ReportedModel()
	out, err := p.commit(ctx, t, *doc, primary)
	if err != nil {
		p.keepVectors(ctx, t, *doc)
		return sink.Outcome{}, savedChunks{}, err
	}
	return out, saved, nil
}

// commit writes doc to t in its transaction (upsertIn), traced as
// ragsync.sink.tx; for the primary, its time and its wait for a
// connection are observed.
func (p *Pipeline) commit(ctx context.Context, t Target, doc sink.Document, primary bool) (sink.Outcome, error) {
	start := time.Now()
	sctx, span := tracer().Start(ctx, "ragsync.sink.tx")
	sctx, wait := sink.TrackConnWait(sctx)
	out, err := p.upsertIn(sctx, t, doc, primary)
	endSpan(span, err)
	if err != nil {
		return sink.Outcome{}, fmt.Errorf("upsert %s: %w", doc.ID, err)
	}
	if primary {
		p.metrics.observeTx(start, wait)
	}
	return out, nil
}

// embedMissing sets the vector of every chunk whose content hash t has no
// stored embedding for, embedding each distinct text once. Chunks with a
// stored embedding keep a nil vector: the sink takes it from its cache.
// For the primary, near-duplicate reuse (see ReuseConfig) first lets a
// chunk take a stored vector of the same document whose origin text is
// similar enough, by setting VectorHash, and the edit's magnitude is
// recorded. It returns how many distinct chunks took a cached or reused
// vector, which the caller counts once the sink applied the document.
func (p *Pipeline) embedMissing(ctx context.Context, t Target, doc *sink.Document, pre *sink.Lookup, primary bool, w *work) (savedChunks, error) {
	if primary {
		measureEdit(pre.Chunks, doc)
	}
	// The sink need not probe the cache up front for what is stored.
	doc.StoredKeys = make([]string, 0, len(pre.Chunks))
	for _, c := range pre.Chunks {
		doc.StoredKeys = append(doc.StoredKeys, c.VectorHash)
	}
	if len(doc.Chunks) == 0 {
		return savedChunks{}, nil
	}
	hashes := distinctHashes(doc.Chunks)
	var missing []int
	for i, c := range doc.Chunks {
		if !pre.Cached[c.Hash] {
			missing = append(missing, i)
		}
	}
	if primary && !p.cfg.Reuse.Disabled && len(missing) > 0 {
		missing = p.planReuse(p.cfg.Reuse, pre.Chunks, doc, missing)
	}
	need := neededTexts(doc.Chunks, missing)
	reused := countReused(doc.Chunks)
	saved := savedChunks{cached: len(hashes) - len(need.texts) - reused, reused: reused}
	if len(need.texts) == 0 {
		return saved, nil
	}
	vecs, err := p.embedSlices(ctx, t, need, primary, w)
	if err != nil {
		return savedChunks{}, err
	}
	if vecs == nil {
		return saved, nil // sliced: the sink takes them from the cache
	}
	for i := range doc.Chunks {
		if n, ok := need.at[doc.Chunks[i].Hash]; ok {
			doc.Chunks[i].Vector = vecs[n]
		}
	}
	return saved, nil
}

// needed is the distinct texts a document needs embedded, in first
// appearance order, with their token counts and hashes.
type needed struct {
	texts  []string
	tokens []int
	hashes []string
	at     map[string]int // hash → index in texts
}

func (n needed) has(hash string) bool { _, ok := n.at[hash]; return ok }

// neededTexts is the distinct texts of chunks[i] for i in missing.
func neededTexts(chunks []sink.Chunk, missing []int) needed {
	n := needed{at: make(map[string]int, len(missing))}
	for _, i := range missing {
		c := chunks[i]
		if n.has(c.Hash) {
			continue
		}
		n.at[c.Hash] = len(n.texts)
		n.texts = append(n.texts, c.Text)
		n.tokens = append(n.tokens, c.Tokens)
		n.hashes = append(n.hashes, c.Hash)
	}
	return n
}

// countReused is how many distinct chunks took a near-duplicate's vector.
func countReused(chunks []sink.Chunk) int {
	reused := map[string]bool{}
	for _, c := range chunks {
		if c.VectorHash != "" {
			reused[c.Hash] = true
		}
	}
	return len(reused)
}

// embedSlices embeds need in slices of EmbedSliceChunks with t's embedder.
// With more than one slice, each slice's vectors go to t's embedding cache
// at once and are dropped here (the result is nil): the vectors held stay
// bounded whatever the document's size, and a failure or restart later
// re-embeds nothing already paid for (the sink takes cached vectors by
// hash). A document that fits one slice keeps its vectors on the chunks,
// and the sink caches them inside the document's own transaction: one
// round trip and one transaction fewer per document. Its price is that a
// crash between the embedding and the commit re-embeds at most one slice;
// a failed transaction caches them (keepVectors).
func (p *Pipeline) embedSlices(ctx context.Context, t Target, need needed, primary bool, w *work) ([][]float32, error) {
	label := "embedded"
	if !primary {
		label = "shadow_embedded"
	}
	sliced := len(need.texts) > p.cfg.EmbedSliceChunks
	var vecs [][]float32
	if !sliced {
		vecs = make([][]float32, len(need.texts))
	}
	for lo := 0; lo < len(need.texts); lo += p.cfg.EmbedSliceChunks {
		hi := min(lo+p.cfg.EmbedSliceChunks, len(need.texts))
		w.mark(stageProvider)
		got, err := t.Embedder.EmbedCounted(ctx, need.texts[lo:hi], need.tokens[lo:hi])
		if err != nil {
			// Left as held by the provider: the retry waits for it.
			return nil, err
		}
		w.mark(stageSink)
		if len(got) != hi-lo {
			return nil, fmt.Errorf("embedder returned %d vectors for %d texts", len(got), hi-lo)
		}
		// Counted here, not after the write: the API call was paid either way.
		if primary {
			p.stats.add("chunks_embedded", hi-lo)
		}
		p.metrics.chunks.WithLabelValues(label).Add(float64(hi - lo))
		if sliced {
			if err := t.Index.CacheVectors(ctx, need.hashes[lo:hi], need.texts[lo:hi], got, t.Embedder.ReportedModel()); err != nil {
				return nil, err
			}
			continue
		}
		copy(vecs[lo:hi], got)
	}
	return vecs, nil
}

// keepVectors writes the vectors a document carried to t's cache after its
// transaction failed, so a retry or replay pays for none of them again, as
// when they were cached ahead of the transaction. Best effort: the
// transaction's error is what the caller reports, and a cache write that
// fails too costs only a re-embedding.
func (p *Pipeline) keepVectors(ctx context.Context, t Target, doc sink.Document) {
	var hashes, texts []string
	var vecs [][]float32
	for _, c := range doc.Chunks {
		if c.Vector != nil && c.VectorHash == "" {
			hashes, texts, vecs = append(hashes, c.Hash), append(texts, c.Text), append(vecs, c.Vector)
		}
	}
	if len(hashes) > 0 {
		_ = t.Index.CacheVectors(ctx, hashes, texts, vecs, doc.Provenance.ModelVersion)
	}
}

// upsertIn is t's Upsert; for the primary, with the Observer told before
// the write and after the commit (see Observer).
func (p *Pipeline) upsertIn(ctx context.Context, t Target, doc sink.Document, primary bool) (sink.Outcome, error) {
	o := p.st.Observer
	if !primary || o == nil {
		return t.Index.Upsert(ctx, doc)
	}
	if err := o.Upserting(ctx, doc.Tenant, doc.ID); err != nil {
		return sink.Outcome{}, err
	}
	out, err := t.Index.Upsert(ctx, doc)
	if err != nil || out.Stale || out.TextChanged {
		return out, err // nothing was written
	}
	return out, o.Upserted(ctx, doc.Tenant, doc.ID)
}

// truncate deletes every document of the change's table from the target,
// then from the shadows.
func (p *Pipeline) truncate(ctx context.Context, ch cdc.Change) error {
	op := string(ch.Op)
	if _, ok := p.table(ch.Table); !ok {
		// Not ours: applying it would delete nothing, yet leave a fence
		// row for a table the index does not hold.
		p.count(op, "unmatched_table")
		return nil
	}
	n, err := p.st.Target.Index.Truncate(ctx, ch.Table, ch.Version, ch.Version.Time())
	if err == nil && p.st.Observer != nil {
		err = p.st.Observer.Truncated(ctx, ch.Table)
	}
	if err != nil {
		return fmt.Errorf("truncate %s: %w", ch.Table, err)
	}
	p.count(op, "applied")
	p.stats.add("documents_deleted", n)
	return p.shadowed(ctx, ch.Table, func(t Target) error {
		_, err := t.Index.Truncate(ctx, ch.Table, ch.Version, ch.Version.Time())
		return err
	})
}

// delete deletes the change's document from the target, then from the
// shadows unless the target holds a later change (which reached the
// shadows, or is read by reindex's second pass).
func (p *Pipeline) delete(ctx context.Context, ch cdc.Change) error {
	op := string(ch.Op)
	if _, ok := p.table(ch.Table); !ok {
		// Not ours: a delete would leave a tombstone row for a document
		// the index never held.
		p.count(op, "unmatched_table")
		return nil
	}
	start := time.Now()
	sctx, span := tracer().Start(ctx, "ragsync.sink.tx")
	sctx, wait := sink.TrackConnWait(sctx)
	out, err := p.st.Target.Index.Delete(sctx, ch.Table, ch.DocKey, ch.Version, ch.Version.Time())
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
		return nil
	}
	return p.shadowed(ctx, DocID(ch), func(t Target) error {
		_, err := t.Index.Delete(ctx, ch.Table, ch.DocKey, ch.Version, ch.Version.Time())
		return err
	})
}
