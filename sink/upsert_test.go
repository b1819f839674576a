package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func TestUpsertDiffsChunks(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	const id = "public.articles/1"

	out, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b", "c")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 3}, out)
	before := chunkRows(t, b, id)
	require.Len(t, before, 3)

	// Edit b, insert x at the front, so a and c move and b is replaced.
	out, err = s.Upsert(ctx, doc("1", 2, chunks("x", "a", "b2", "c")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 2, Moved: 2, Removed: 1}, out)
	after := chunkRows(t, b, id)
	require.Equal(t, []string{"x", "a", "b2", "c"}, []string{after[0].Hash, after[1].Hash, after[2].Hash, after[3].Hash})
	require.NotEqual(t, xminOf(before, "a"), xminOf(after, "a"), "a moved, so its row was updated")

	// Edit only the last chunk: the first three rows must not be written.
	out, err = s.Upsert(ctx, doc("1", 3, chunks("x", "a", "b2", "c2")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1, Unchanged: 3, Removed: 1}, out)
	last := chunkRows(t, b, id)
	for _, h := range []string{"x", "a", "b2"} {
		require.Equal(t, xminOf(after, h), xminOf(last, h), "chunk %s must be untouched (same xmin)", h)
	}
	require.Empty(t, xminOf(last, "c"))

	// Swap two chunks: legal thanks to the deferred unique constraint.
	out, err = s.Upsert(ctx, doc("1", 4, chunks("a", "x", "b2", "c2")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Moved: 2, Unchanged: 2}, out)

	// Remove everything.
	out, err = s.Upsert(ctx, doc("1", 5, nil))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Removed: 4}, out)
	require.Empty(t, chunkRows(t, b, id))

	sd, ok, err := s.Document(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ver(5), sd.Version)
	require.Empty(t, sd.Hashes)
}

func TestUpsertStaleAndDuplicate(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()

	_, err := s.Upsert(ctx, doc("1", 5, chunks("a", "b")))
	require.NoError(t, err)
	rows := chunkRows(t, b, "public.articles/1")

	out, err := s.Upsert(ctx, doc("1", 4, chunks("old")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)

	out, err = s.Upsert(ctx, doc("1", 5, chunks("a", "b")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Duplicate: true}, out)

	// Same version with other content is still a duplicate: the first
	// application of a version wins.
	out, err = s.Upsert(ctx, doc("1", 5, chunks("zzz")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Duplicate: true}, out)

	require.Equal(t, rows, chunkRows(t, b, "public.articles/1"), "nothing may be written")
	sd, _, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.Equal(t, ver(5), sd.Version)
	require.Equal(t, []string{"a", "b"}, sd.Hashes)
}

func TestUpsertRejectsInvalidDocuments(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		mutate func(*sink.Document)
		want   error
	}{
		{"no table", func(d *sink.Document) { d.Table = "" }, sink.ErrInvalidDocument},
		{"id mismatch", func(d *sink.Document) { d.ID = "public.other/1" }, sink.ErrInvalidDocument},
		{"zero version", func(d *sink.Document) { d.Version.Kind, d.Version.Parts = "", nil }, sink.ErrInvalidDocument},
		{"repeated position", func(d *sink.Document) { d.Chunks[1].Position = 0 }, sink.ErrInvalidDocument},
		{"empty hash", func(d *sink.Document) { d.Chunks[0].Hash = "" }, sink.ErrInvalidDocument},
		{"wrong dimensions", func(d *sink.Document) { d.Chunks[0].Vector = []float32{1, 2} }, sink.ErrInvalidDocument},
		{"missing vector", func(d *sink.Document) { d.Chunks[1].Vector = nil; d.Chunks[1].Hash = "never-seen" }, sink.ErrMissingVector},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := doc("bad", 1, chunks("a", "b"))
			tc.mutate(&d)
			_, err := s.Upsert(ctx, d)
			require.ErrorIs(t, err, tc.want)
			require.False(t, sink.Retryable(err))
		})
	}
	// The failed upserts left nothing behind (one transaction each).
	_, ok, err := s.Document(ctx, "public.articles/bad")
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, chunkRows(t, b, "public.articles/bad"))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, sink.Stats{}, st)
}

func TestVectorsReuseAcrossDocuments(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()

	got, err := s.Vectors(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	got, err = s.Vectors(ctx, []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Equal(t, map[string][]float32{"a": vecFor("a"), "b": vecFor("b")}, got)

	// A second document with the same paragraph needs no vector for it.
	d := doc("2", 1, chunks("b", "c"))
	d.Chunks[0].Vector = nil
	out, err := s.Upsert(ctx, d)
	require.NoError(t, err)
	require.Equal(t, 2, out.Inserted)
	hits, err := s.Search(ctx, vecFor("b"), sink.Query{K: 2, Table: "public.articles"})
	require.NoError(t, err)
	require.Len(t, hits, 2)
	require.InDelta(t, 1.0, hits[0].Score, 1e-6)
	require.InDelta(t, 1.0, hits[1].Score, 1e-6)

	// Another model or size does not share the cache.
	other, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "other", Model: "other-model", Dimensions: dims})
	require.NoError(t, err)
	got, err = other.Vectors(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.Empty(t, got)

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, sink.Stats{Documents: 2, Chunks: 4, CacheEntries: 3}, st)
}

// A chunk whose text changed only in what normalisation ignores keeps its
// hash and vector, but its stored text follows the source, so the index
// equals a fresh load.
func TestUpsertReformattedTextRewritesTextOnly(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	cs := chunks("a", "b")
	_, err := s.Upsert(ctx, doc("1", 1, cs))
	require.NoError(t, err)
	before := chunkRows(t, b, "public.articles/1")

	re := chunks("a", "b")
	re[0].Text = "text  of\n a" // same hash "a", different whitespace
	re[0].Vector, re[1].Vector = nil, nil
	out, err := s.Upsert(ctx, doc("1", 2, re))
	require.NoError(t, err)
	require.Equal(t, 1, out.Unchanged)
	require.Equal(t, 1, out.Moved, "the reformatted chunk is rewritten in place")
	require.Zero(t, out.Inserted)

	after := chunkRows(t, b, "public.articles/1")
	require.Equal(t, xminOf(before, "b"), xminOf(after, "b"), "the untouched chunk is not written")
	var text string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT text FROM "+b.schema+".chunks WHERE doc_id = 'public.articles/1' AND position = 0").Scan(&text))
	require.Equal(t, "text  of\n a", text)
}

// Keys a caller lists in StoredKeys are not probed up front; one that turns
// out to be inserted (the list was stale, or wrong) is still taken from the
// cache under the row lock, and one the cache lacks still fails.
func TestUpsertStoredKeysAreCheckedWhenInserted(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	const id = "public.articles/1"

	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("2", 1, chunks("c"))) // caches c
	require.NoError(t, err)

	// a is kept, c is inserted from the cache although StoredKeys claims
	// it is stored.
	d := doc("1", 2, chunks("a", "c"))
	d.Chunks[0].Vector, d.Chunks[1].Vector = nil, nil
	d.StoredKeys = []string{"a", "b", "c"}
	out, err := s.Upsert(ctx, d)
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1, Unchanged: 1, Removed: 1}, out)
	rows := chunkRows(t, b, id)
	require.Equal(t, []string{"a", "c"}, []string{rows[0].Hash, rows[1].Hash})
	vecs, err := s.Vectors(ctx, []string{"c"})
	require.NoError(t, err)
	require.Equal(t, vecFor("c"), vecs["c"])

	// A listed key with no cached vector is refused as it always was.
	d = doc("1", 3, chunks("a", "zz"))
	d.Chunks[0].Vector, d.Chunks[1].Vector = nil, nil
	d.StoredKeys = []string{"a", "zz"}
	_, err = s.Upsert(ctx, d)
	require.ErrorIs(t, err, sink.ErrMissingVector)
}
