package sink_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// seedBesideOther writes docs and a document "gone", deleted again, to a
// new index, and document "z" to another index of the same schema.
func seedBesideOther(t *testing.T, docs ...sink.Document) *sink.Store {
	t.Helper()
	s, b := setup(t)
	ctx := context.Background()
	for _, d := range append(docs, doc("gone", 1, chunks("g1"))) {
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}
	_, err := s.Delete(ctx, "public.articles", "gone", ver(2), docTime)
	require.NoError(t, err)
	other, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "other", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	_, err = other.Upsert(ctx, doc("z", 1, chunks("z1")))
	require.NoError(t, err)
	return s
}

// TestEachLiveContent reads every live document of the index with its
// chunks in position order: a document without chunks comes with none, a
// deleted one and another index's documents not at all, and fn's error
// stops the read.
func TestEachLiveContent(t *testing.T) {
	s := seedBesideOther(t, doc("a", 1, chunks("a1", "a2", "a3")), doc("empty", 1, nil))
	ctx := context.Background()

	got := map[string][]sink.LiveChunk{}
	var order []string
	require.NoError(t, s.EachLiveContent(ctx, func(id string, cs []sink.LiveChunk) error {
		got[id] = cs
		order = append(order, id)
		return nil
	}))
	require.Equal(t, []string{sink.DocID("public.articles", "a"), sink.DocID("public.articles", "empty")}, order)
	a := got[sink.DocID("public.articles", "a")]
	require.Len(t, a, 3)
	for i, h := range []string{"a1", "a2", "a3"} {
		require.Equal(t, h, a[i].Hash)
		require.Equal(t, "text of "+h, a[i].Text)
		require.Equal(t, vecFor(h), a[i].Vector)
	}
	require.Empty(t, got[sink.DocID("public.articles", "empty")])

	stop := errors.New("stop")
	calls := 0
	err := s.EachLiveContent(ctx, func(string, []sink.LiveChunk) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

// TestEachDocument reads every document of the index, the deleted one too,
// in id order, each as Document reads it; another index's documents not at
// all; and fn's error stops the read.
func TestEachDocument(t *testing.T) {
	s := seedBesideOther(t, doc("b", 1, chunks("b1", "b2")), doc("a", 1, chunks("a1")))
	ctx := context.Background()

	var got []sink.StoredDocument
	require.NoError(t, s.EachDocument(ctx, func(d sink.StoredDocument) error {
		got = append(got, d)
		return nil
	}))
	ids := []string{sink.DocID("public.articles", "a"), sink.DocID("public.articles", "b"), sink.DocID("public.articles", "gone")}
	require.Len(t, got, len(ids))
	for i, id := range ids {
		want, ok, err := s.Document(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, got[i])
	}
	require.Equal(t, []string{"b1", "b2"}, got[1].Hashes)
	require.True(t, got[2].Deleted)

	stop := errors.New("stop")
	calls := 0
	err := s.EachDocument(ctx, func(sink.StoredDocument) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}
