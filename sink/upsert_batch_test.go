package sink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// vectorless drops the vectors, as the pipeline sends chunks whose vectors
// are cached.
func vectorless(cs []sink.Chunk) []sink.Chunk {
	for i := range cs {
		cs[i].Vector = nil
	}
	return cs
}

// TestUpsertFailureRollsBack: Upsert opens its transaction inside a batch,
// so a failure after the row lock must roll it back before the connection
// returns to the pool: the row is unlocked at once and nothing of the
// failed version is written.
func TestUpsertFailureRollsBack(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	const id = "public.articles/1"
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	before := chunkRows(t, b, id)

	// "z" is neither given nor cached.
	_, err = s.Upsert(ctx, doc("1", 2, vectorless(chunks("a", "z"))))
	require.ErrorIs(t, err, sink.ErrMissingVector)

	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '2s'; SELECT 1 FROM %s.documents WHERE id = '%s' FOR UPDATE", b.schema, id))
	require.NoError(t, err, "the failed upsert released the row lock")
	require.NoError(t, tx.Rollback(ctx))

	sd, ok, err := s.Document(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ver(1), sd.Version, "nothing of the failed version was written")
	require.Equal(t, before, chunkRows(t, b, id))
	// Every pool connection is usable, none left inside a transaction.
	for range 2 * int(b.pool.Config().MaxConns) {
		out, err := s.Upsert(ctx, doc("1", 3, chunks("a", "c")))
		require.NoError(t, err)
		require.True(t, out.Applied || out.Duplicate)
	}
}

// TestUpsertRepeatedCachedParagraph: a vector key the document already
// stores is not locked by the first batch; when it is inserted once more
// (a paragraph repeated), Upsert locks and checks it separately.
func TestUpsertRepeatedCachedParagraph(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	const id = "public.articles/1"
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a")))
	require.NoError(t, err)
	before := chunkRows(t, b, id)

	out, err := s.Upsert(ctx, doc("1", 2, vectorless(chunks("a", "a"))))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1, Unchanged: 1}, out)
	after := chunkRows(t, b, id)
	require.Len(t, after, 2)
	require.Equal(t, before[0], after[0], "the stored copy is untouched")

	// With its cache entry gone, the repeat has no vector to copy.
	_, err = b.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s.embedding_cache WHERE content_hash = 'a'", b.schema))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("1", 3, vectorless(chunks("a", "a", "a"))))
	require.ErrorIs(t, err, sink.ErrMissingVector)
	require.Equal(t, after, chunkRows(t, b, id))
}

// TestUpsertNewDocumentMissingVector: a new document is refused whole
// when one chunk has no vector, and leaves no row behind.
func TestUpsertNewDocumentMissingVector(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	_, err := s.Upsert(ctx, doc("n", 1, chunks("p")))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("m", 1, vectorless(chunks("p", "q"))))
	require.ErrorIs(t, err, sink.ErrMissingVector)
	_, ok, err := s.Document(ctx, "public.articles/m")
	require.NoError(t, err)
	require.False(t, ok, "no document row is left")
	out, err := s.Upsert(ctx, doc("m", 1, vectorless(chunks("p"))))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1}, out)
}

// TestLookupMatchesSeparateReads: Lookup returns what Document (but only
// its identity and fence: not the row, as large as the document, nor its
// metadata or hashes), StoredChunks and Cached return, for a stored, a
// deleted and an unknown document.
func TestLookupMatchesSeparateReads(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("2", 1, chunks("c")))
	require.NoError(t, err)
	_, err = s.Delete(ctx, "public.articles", "2", ver(2), docTime)
	require.NoError(t, err)
	hashes := []string{"a", "c", "nope"}
	for _, id := range []string{"public.articles/1", "public.articles/2", "public.articles/9"} {
		l, err := s.Lookup(ctx, id, hashes)
		require.NoError(t, err)
		d, found, err := s.Document(ctx, id)
		require.NoError(t, err)
		cs, err := s.StoredChunks(ctx, id)
		require.NoError(t, err)
		cached, err := s.Cached(ctx, hashes)
		require.NoError(t, err)
		require.Equal(t, found, l.Found, id)
		// The fence and identity, not the row, metadata or hashes.
		require.Nil(t, l.Doc.Row, id)
		require.Nil(t, l.Doc.Metadata, id)
		require.Nil(t, l.Doc.Hashes, id)
		d.Metadata, d.Tenant, d.Row, d.Hashes = nil, "", nil, nil
		require.Empty(t, cmp.Diff(d, l.Doc), id)
		require.Empty(t, cmp.Diff(cs, l.Chunks), id)
		require.Equal(t, cached, l.Cached, id)
	}
	l, err := s.Lookup(ctx, "public.articles/1", nil)
	require.NoError(t, err)
	require.True(t, l.Found)
	require.Empty(t, l.Cached)
}
