package pipeline_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
)

// TestRefinesOnlyTheChangedRegion: a create is stored as Split cuts it; an
// update cuts only the chunk it changed into fine pieces (Chunker.Refine)
// and embeds just those; a second edit inside the refined region embeds
// one fine piece, the others being known to the cache. With a Lookup stage
// (as serve wires it) and without one.
func TestRefinesOnlyTheChangedRegion(t *testing.T) {
	b := setup(t)
	ch, err := chunker.New(chunker.Config{TargetTokens: 470, RefineTargetTokens: chunker.SuggestedRefineTargetTokens})
	require.NoError(t, err)
	require.True(t, ch.Refines())
	stages := pipeline.Stages{
		Splitter:    ch,
		DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	}
	apply := func(op string, lsn int64, body string) {
		t.Helper()
		stages.Source = &sliceSource{batches: [][]cdc.Record{{event(op, 1, lsn, body)}}}
		p, err := pipeline.New(pipeline.Config{Workers: 1, Reuse: pipeline.ReuseConfig{Disabled: true}}, stages)
		require.NoError(t, err)
		require.NoError(t, p.Run(t.Context()))
		require.Empty(t, b.dlq.all())
	}
	stored := func() []string {
		t.Helper()
		cs, err := b.store.StoredChunks(t.Context(), "public.docs/1")
		require.NoError(t, err)
		var hs []string
		for _, c := range cs {
			hs = append(hs, c.Hash)
		}
		return hs
	}
	hashes := func(cs []chunker.Chunk) []string {
		var hs []string
		for _, c := range cs {
			hs = append(hs, c.Hash)
		}
		return hs
	}

	ps := make([]string, 60)
	for i := range ps {
		ps[i] = fmt.Sprintf("Paragraph %d: the harbour records its visitors through winter %d, and the keepers note every change in a ledger of %d pages.", i, 1900+i*7, 40+i*3)
	}
	v1 := strings.Join(ps, "\n\n")
	apply("c", 10, v1)
	coarse1 := ch.Split(v1)
	require.Equal(t, hashes(coarse1), stored(), "a create stays as Split cuts it")
	require.Len(t, b.emb.embedded(), len(coarse1))

	ps[30] = strings.Replace(ps[30], "visitors", "guests", 1)
	v2 := strings.Join(ps, "\n\n")
	before := len(b.emb.embedded())
	apply("u", 20, v2)
	keep := map[string]bool{}
	for _, h := range hashes(coarse1) {
		keep[h] = true
	}
	want := ch.Refine(ch.Split(v2), func(h string) bool { return keep[h] })
	require.Equal(t, hashes(want), stored(), "the update refines the chunk it changed")
	require.Greater(t, len(want), len(coarse1))
	var pieces []string
	for _, c := range want {
		if !keep[c.Hash] {
			pieces = append(pieces, c.Text)
		}
	}
	require.Equal(t, pieces, b.emb.embedded()[before:], "only the changed chunk's pieces are embedded")

	ps[32] = strings.Replace(ps[32], "ledger", "register", 1)
	before = len(b.emb.embedded())
	apply("u", 30, strings.Join(ps, "\n\n"))
	got := b.emb.embedded()[before:]
	require.Len(t, got, 1, "a second edit of the refined region embeds one fine piece: %q", got)
	require.Contains(t, got[0], "register")
	require.Len(t, stored(), len(want))
}
