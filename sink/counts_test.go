package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// TestWritesAndLiveDocuments: the counts a watcher of another writer reads
// follow the index: documents and chunks, updates (which record an edit
// measure) apart from creates, the chunks written after a mark, and live
// documents per source table (a deleted one no longer counts).
func TestWritesAndLiveDocuments(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	cat := sink.NewCatalog(b.pool, b.schema)
	w, err := cat.Writes(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, sink.Writes{}, w, "an empty index")

	for _, key := range []string{"1", "2"} {
		_, err := s.Upsert(ctx, doc(key, 10, chunks("a"+key, "b"+key)))
		require.NoError(t, err)
	}
	w, err = cat.Writes(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), w.Documents)
	require.Zero(t, w.Updated, "creates record no edit")
	require.Equal(t, int64(4), w.Chunks)
	require.Equal(t, int64(4), w.ChunksAfter)
	mark := w.LastChunk
	require.Positive(t, mark)

	edited := doc("1", 20, chunks("a1", "c1"))
	edited.EditSimilarity, edited.EditMethod = 80, "words"
	_, err = s.Upsert(ctx, edited)
	require.NoError(t, err)
	w, err = cat.Writes(ctx, mark)
	require.NoError(t, err)
	require.Equal(t, int64(1), w.Updated)
	require.Equal(t, int64(1), w.ChunksAfter, "only the edit's new chunk is after the mark")
	require.Greater(t, w.LastChunk, mark)

	n, err := cat.LiveDocuments(ctx, "public.articles")
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	_, err = s.Delete(ctx, "public.articles", "2", ver(30), docTime)
	require.NoError(t, err)
	n, err = cat.LiveDocuments(ctx, "public.articles")
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a deleted document is not live")
	n, err = cat.LiveDocuments(ctx, "public.other")
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestStatsCountLiveChunksApartFromDeletedOnes: index list's chunk count
// is what queries can find; the chunks a soft-deleted document keeps until
// purge are counted on their own.
func TestStatsCountLiveChunksApartFromDeletedOnes(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	cat := sink.NewCatalog(b.pool, b.schema)
	for _, key := range []string{"1", "2"} {
		_, err := s.Upsert(ctx, doc(key, 10, chunks("a"+key, "b"+key, "c"+key)))
		require.NoError(t, err)
	}
	_, err := s.Delete(ctx, "public.articles", "2", ver(30), docTime)
	require.NoError(t, err)
	stats, err := cat.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.Equal(t, int64(1), stats[0].Documents)
	require.Equal(t, int64(3), stats[0].Chunks, "only the live document's chunks")
	require.Equal(t, int64(3), stats[0].DeletedChunks, "the deleted document's chunks, apart")
}
