package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/sink"
)

// Shadows are the other indexes of the primary's family (blue/green
// re-index): every change the primary applied is applied to each too,
// through the same write path, with its own embedder (its model and
// dimensions) and its own cache, so that an index being built never falls
// behind and a retired one stays ready for a rollback.

// SetShadows replaces the set of shadows. It waits for the batch in flight
// (if any) to finish, so that when it returns every change applied from
// then on reaches the new set and every change before it is committed in
// the primary: a reindex that starts its second pass after SetShadows
// returned misses nothing (docs/reindex.md). A shadow without an index or
// an embedder is refused, and the set stays as it was. Safe for concurrent
// use.
func (p *Pipeline) SetShadows(shadows []Target) error {
	var errs []error
	for _, sh := range shadows {
		errs = append(errs, sh.check("shadow"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.shadowMu.Lock()
	defer p.shadowMu.Unlock()
	p.shadows = slices.Clone(shadows)
	return nil
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

// shadowed runs fn for every shadow. Called inside applyOne (which holds
// shadowMu for reading). A transient failure is returned, so the change is
// retried (the primary answers the replay as a Duplicate, the shadows that
// already have it too); any other failure is logged and counted, and the
// primary's write stands: the shadow is a copy being built or kept, and
// reindex (run again) repairs it from the primary.
func (p *Pipeline) shadowed(ctx context.Context, id string, fn func(Target) error) error {
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

// shadowUpsert writes the primary's rendered document (same chunks, same
// version; a metadata-only update as such) to every shadow, through the
// write path the primary took.
func (p *Pipeline) shadowUpsert(ctx context.Context, pr prepared) error {
	doc := pr.doc
	return p.shadowed(ctx, doc.ID, func(t Target) error {
		d := doc
		if d.MetadataOnly {
			// A shadow that holds the same text takes the metadata alone;
			// one that does not (it is catching up) gets the text cut.
			out, err := t.Index.Upsert(ctx, d)
			if err != nil || !out.TextChanged {
				return err
			}
			d.MetadataOnly, d.Chunks = false, sinkChunks(p.st.Splitter.Split(pr.text))
		} else {
			// Each target gets chunks without vectors: its own plan decides.
			d.Chunks = make([]sink.Chunk, len(doc.Chunks))
			for i, c := range doc.Chunks {
				d.Chunks[i] = sink.Chunk{Position: c.Position, Hash: c.Hash, Text: c.Text, Tokens: c.Tokens}
			}
		}
		pre, err := t.Index.Lookup(ctx, d.ID, distinctHashes(d.Chunks))
		if err != nil {
			return fmt.Errorf("read %s: %w", d.ID, err)
		}
		if pre.Found && pre.Doc.Version.Compare(d.Version) > 0 {
			return nil // the shadow holds a later change: nothing to pay for
		}
		_, _, err = p.write(ctx, t, &d, &pre, false, pr.w)
		return err
	})
}

// flush makes every write so far durable in the target and the shadows
// (Index.Flush), before a source position is acknowledged.
func (p *Pipeline) flush(ctx context.Context) error {
	if err := p.st.Target.Index.Flush(ctx); err != nil {
		return err
	}
	p.shadowMu.RLock()
	defer p.shadowMu.RUnlock()
	for _, sh := range p.shadows {
		if err := sh.Index.Flush(ctx); err != nil {
			return fmt.Errorf("shadow %s: %w", sh.Name, err)
		}
	}
	return nil
}

func newShadowMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ragsync_pipeline_shadow_writes_total",
		Help: "Writes of changes to shadow indexes (blue/green re-index) by outcome: applied, retried (transient), failed (logged; the primary's write stands).",
	}, []string{"outcome"})
}
