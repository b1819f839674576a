package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// Shadow is another index of the primary's family (blue/green
// re-index): every change the primary applied is applied to it too, with
// its own embedder (its model and dimensions) and its own cache, so that an
// index being built never falls behind and a retired one stays ready for a
// rollback.
type Shadow struct {
	// Name identifies the shadow in logs.
	Name string
	// Sink is the shadow's store.
	Sink Sink
	// Embedder embeds the chunks the shadow's cache lacks.
	Embedder Embedder
	// Cache, when set, receives the shadow's new vectors, and tells which
	// are cached; nil keeps them on the chunks and asks Sink.Vectors.
	Cache VectorCache
}

// SetShadows replaces the set of shadows. It waits for the batch in flight
// (if any) to finish, so that when it returns every change applied from
// then on reaches the new set and every change before it is committed in
// the primary: a reindex that starts its second pass after SetShadows
// returned misses nothing (docs/reindex.md). Safe for concurrent use.
func (p *Pipeline) SetShadows(shadows []Shadow) {
	p.shadowMu.Lock()
	defer p.shadowMu.Unlock()
	p.shadows = slices.Clone(shadows)
}

// Shadows returns the names of the current shadows.
func (p *Pipeline) Shadows() []string {
	p.shadowMu.RLock()
	defer p.shadowMu.RUnlock()
	names := make([]string, len(p.shadows))
	for i, s := range p.shadows {
		names[i] = s.Name
	}
	return names
}

// shadowed runs fn for every shadow. Called inside Process (which holds
// shadowMu for reading). A transient failure is returned, so the change is
// retried (the primary answers the replay as a Duplicate, the shadows that
// already have it too); any other failure is logged and counted, and the
// primary's write stands: the shadow is a copy being built or kept, and
// reindex (run again) repairs it from the primary.
func (p *Pipeline) shadowed(ctx context.Context, id string, fn func(Shadow) error) error {
	var retry []error
	for _, sh := range p.shadows {
		err := fn(sh)
		switch {
		case err == nil:
			p.metrics.shadowWrites.WithLabelValues("applied").Inc()
		case ctx.Err() != nil:
			return err
		case p.st.Transient(err):
			p.metrics.shadowWrites.WithLabelValues("retried").Inc()
			retry = append(retry, fmt.Errorf("shadow %s: %w", sh.Name, err))
		default:
			p.metrics.shadowWrites.WithLabelValues("failed").Inc()
			p.stats.add("shadow_failed", 1)
			p.log.WarnContext(ctx, "shadow index write failed; the primary's write stands, run ragsync reindex --to "+sh.Name+" again to repair it",
				"shadow", sh.Name, "doc_id", id, "error", err)
		}
	}
	return errors.Join(retry...)
}

// shadowUpsert applies the primary's rendered document (same chunks, same
// version) to every shadow.
func (p *Pipeline) shadowUpsert(ctx context.Context, doc sink.Document) error {
	if len(p.shadows) == 0 {
		return nil
	}
	return p.shadowed(ctx, doc.ID, func(sh Shadow) error {
		d := doc
		d.StoredKeys = nil // the primary's chunks, not the shadow's
		// Vectors and near-duplicate reuse belong to the primary's model.
		d.Chunks = make([]sink.Chunk, len(doc.Chunks))
		for i, c := range doc.Chunks {
			d.Chunks[i] = sink.Chunk{Position: c.Position, Hash: c.Hash, Text: c.Text, Tokens: c.Tokens}
		}
		if err := p.embedShadow(ctx, sh, d.Chunks); err != nil {
			return fmt.Errorf("embed %s: %w", d.ID, err)
		}
		if _, err := sh.Sink.Upsert(ctx, d); err != nil {
			return fmt.Errorf("upsert %s: %w", d.ID, err)
		}
		return nil
	})
}

// embedShadow embeds the chunks the shadow has no vector for, each
// distinct text once, and caches them (or sets them on the chunks).
func (p *Pipeline) embedShadow(ctx context.Context, sh Shadow, chunks []sink.Chunk) error {
	hashes := distinctHashes(chunks)
	if len(hashes) == 0 {
		return nil
	}
	known := map[string]bool{}
	var vecs map[string][]float32
	var err error
	if sh.Cache != nil {
		known, err = sh.Cache.Cached(ctx, hashes)
	} else {
		vecs, err = sh.Sink.Vectors(ctx, hashes)
		for h := range vecs {
			known[h] = true
		}
	}
	if err != nil {
		return err
	}
	var texts, missing []string
	var tokens []int
	asked := make(map[string]bool, len(hashes))
	for _, c := range chunks {
		if !known[c.Hash] && !asked[c.Hash] {
			asked[c.Hash] = true // each missing text once
			missing = append(missing, c.Hash)
			texts = append(texts, c.Text)
			tokens = append(tokens, c.Tokens)
		}
	}
	if vecs == nil {
		vecs = map[string][]float32{}
	}
	for lo := 0; lo < len(texts); lo += p.cfg.EmbedSliceChunks {
		hi := min(lo+p.cfg.EmbedSliceChunks, len(texts))
		got, err := sh.Embedder.EmbedCounted(ctx, texts[lo:hi], tokens[lo:hi])
		if err != nil {
			return err
		}
		if len(got) != hi-lo {
			return fmt.Errorf("embedder returned %d vectors for %d texts", len(got), hi-lo)
		}
		p.metrics.chunks.WithLabelValues("shadow_embedded").Add(float64(hi - lo))
		if sh.Cache != nil {
			if err := sh.Cache.CacheVectors(ctx, missing[lo:hi], texts[lo:hi], got); err != nil {
				return err
			}
			continue
		}
		for i, v := range got {
			vecs[missing[lo+i]] = v
		}
	}
	if sh.Cache == nil {
		for i := range chunks {
			chunks[i].Vector = vecs[chunks[i].Hash]
		}
	}
	return nil
}

func (p *Pipeline) shadowDelete(ctx context.Context, ch cdc.Change) error {
	if len(p.shadows) == 0 {
		return nil
	}
	return p.shadowed(ctx, DocID(ch), func(sh Shadow) error {
		_, err := sh.Sink.Delete(ctx, ch.Table, ch.DocKey, ch.Version, ch.SourceTS)
		return err
	})
}

func (p *Pipeline) shadowTruncate(ctx context.Context, ch cdc.Change) error {
	if len(p.shadows) == 0 {
		return nil
	}
	return p.shadowed(ctx, ch.Table, func(sh Shadow) error {
		_, err := sh.Sink.Truncate(ctx, ch.Table, ch.Version, ch.SourceTS)
		return err
	})
}

func newShadowMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ragsync_pipeline_shadow_writes_total",
		Help: "Writes of changes to shadow indexes (blue/green re-index) by outcome: applied, retried (transient), failed (logged; the primary's write stands).",
	}, []string{"outcome"})
}
