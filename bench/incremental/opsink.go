package main

import (
	"context"
	"sync"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// ragOpCounts is what ragsync spent on the versions of one event op.
type ragOpCounts struct {
	Versions int `json:"versions"`
	// Tokens of the chunk texts embedded for these versions (each distinct
	// text of a version once, as the pipeline sends it).
	Tokens         int `json:"tokens"`
	ChunksEmbedded int `json:"chunks_embedded"`
	// ChunksReused counts chunks written with another text's vector
	// (near-duplicate reuse).
	ChunksReused int `json:"chunks_reused"`
}

// opSink is the store with ragsync's spending attributed to the event op
// (c, u, r) of each document version. The server's counters cannot be split
// by op, since documents are embedded concurrently; but the pipeline embeds
// per document and hands the fresh vectors to Upsert with the document, so
// the chunks that arrive with a vector are exactly what was sent for that
// version. Every other method, StoredChunks included, is the store's.
type opSink struct {
	*sink.Store
	opOf func(v cdc.Version) string

	mu   sync.Mutex
	byOp map[string]*ragOpCounts
	// sizes are the token counts of every chunk of every version written.
	sizes []int
}

// newOpSink attributes versions to ops by their LSN, which toLines sets to
// (index in the whole history + 1) · lsnStep.
func newOpSink(st *sink.Store, evs []event) *opSink {
	return &opSink{Store: st, opOf: func(v cdc.Version) string {
		if v.Kind != cdc.KindPostgres || len(v.Parts) != 1 || v.Parts[0]%lsnStep != 0 {
			return "?"
		}
		i := int(v.Parts[0]/lsnStep) - 1
		if i < 0 || i >= len(evs) {
			return "?"
		}
		return evs[i].Op
	}}
}

func (s *opSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	out, err := s.Store.Upsert(ctx, d)
	if err != nil || !out.Applied {
		// replay fails the run on anything not applied, and an error is
		// retried with a fresh embedding, counted on that attempt.
		return out, err
	}
	c := ragOpCounts{Versions: 1}
	sent := map[string]bool{}
	for _, ch := range d.Chunks {
		switch {
		case ch.Vector != nil && !sent[ch.Hash]:
			sent[ch.Hash] = true
			c.Tokens += ch.Tokens
			c.ChunksEmbedded++
		case ch.VectorHash != "" && ch.VectorHash != ch.Hash:
			c.ChunksReused++
		}
	}
	op := s.opOf(d.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byOp == nil {
		s.byOp = map[string]*ragOpCounts{}
	}
	t := s.byOp[op]
	if t == nil {
		t = &ragOpCounts{}
		s.byOp[op] = t
	}
	t.Versions += c.Versions
	t.Tokens += c.Tokens
	t.ChunksEmbedded += c.ChunksEmbedded
	t.ChunksReused += c.ChunksReused
	for _, ch := range d.Chunks {
		s.sizes = append(s.sizes, ch.Tokens)
	}
	return out, nil
}

// take returns the counts and the chunk sizes so far and starts again.
func (s *opSink) take() (map[string]*ragOpCounts, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, sizes := s.byOp, s.sizes
	s.byOp, s.sizes = nil, nil
	return m, sizes
}
