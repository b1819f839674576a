package sink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func TestDeleteFencesAndHides(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	ts := time.Unix(1700000100, 0).UTC()
	const id = "public.articles/1"

	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	hits, err := s.Search(ctx, vecFor("a"), sink.Query{K: 5})
	require.NoError(t, err)
	require.Len(t, hits, 2)

	out, err := s.Delete(ctx, "public.articles", "1", ver(2), ts)
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true}, out)

	// Hidden at once from both searches; the chunks stay for undelete.
	hits, err = s.Search(ctx, vecFor("a"), sink.Query{K: 5})
	require.NoError(t, err)
	require.Empty(t, hits)
	hits, err = s.SearchText(ctx, "text", sink.Query{K: 5})
	require.NoError(t, err)
	require.Empty(t, hits)
	require.Len(t, chunkRows(t, b, id), 2)

	// Replay of the delete, and the original create arriving late.
	out, err = s.Delete(ctx, "public.articles", "1", ver(2), ts)
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Duplicate: true}, out)
	out, err = s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)
	out, err = s.Delete(ctx, "public.articles", "1", ver(1), ts)
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)

	sd, ok, err := s.Document(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, sd.Deleted)
	require.Equal(t, ver(2), sd.Version)
	require.Equal(t, ts, sd.SourceTS.UTC())

	// A newer upsert undeletes and reuses the kept chunk rows.
	before := chunkRows(t, b, id)
	out, err = s.Upsert(ctx, doc("1", 3, chunks("a", "c")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Unchanged: 1, Inserted: 1, Removed: 1}, out)
	require.Equal(t, xminOf(before, "a"), xminOf(chunkRows(t, b, id), "a"))
	hits, err = s.Search(ctx, vecFor("c"), sink.Query{K: 5})
	require.NoError(t, err)
	require.Equal(t, []string{id + "#1", id + "#0"}, hitIDs(hits))
	sd, _, err = s.Document(ctx, id)
	require.NoError(t, err)
	require.False(t, sd.Deleted)
	require.Equal(t, map[string]any{"lang": "en"}, sd.Metadata)
	require.Equal(t, map[string]any{"id": "1"}, sd.Row)
}

func TestDeleteUnknownDocumentFencesLateCreate(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()

	out, err := s.Delete(ctx, "public.articles", "9", ver(10), time.Time{})
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true}, out)

	out, err = s.Upsert(ctx, doc("9", 7, chunks("a")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, sink.Stats{Deleted: 1}, st)

	sd, ok, err := s.Document(ctx, "public.articles/9")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, sd.Deleted)
	require.True(t, sd.SourceTS.IsZero())

	_, err = s.Delete(ctx, "", "9", ver(1), time.Time{})
	require.ErrorIs(t, err, sink.ErrInvalidDocument)
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()

	_, err := s.Upsert(ctx, doc("1", 1, chunks("a")))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("2", 2, chunks("b")))
	require.NoError(t, err)
	_, err = s.Delete(ctx, "public.articles", "3", ver(1), time.Time{})
	require.NoError(t, err)
	// Changed after the truncate (higher version): survives it.
	_, err = s.Upsert(ctx, doc("4", 9, chunks("c")))
	require.NoError(t, err)
	other := doc("1", 1, chunks("d"))
	other.Table = "public.other"
	_, err = s.Upsert(ctx, other)
	require.NoError(t, err)

	n, err := s.Truncate(ctx, "public.articles", ver(5), time.Time{})
	require.NoError(t, err)
	require.Equal(t, 2, n, "only live documents at or below the truncate's version")

	hits, err := s.Search(ctx, vecFor("a"), sink.Query{K: 10})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.articles/4#0", "public.other/1#0"}, hitIDs(hits))

	// Older changes arriving late stay fenced out: known documents by their
	// row, a document the index never saw by the table's fence.
	for _, d := range []sink.Document{doc("1", 3, chunks("a")), doc("3", 4, chunks("a")), doc("5", 4, chunks("e"))} {
		out, err := s.Upsert(ctx, d)
		require.NoError(t, err)
		require.Equal(t, sink.Outcome{Stale: true}, out, d.Key)
	}
	// Newer ones apply.
	out, err := s.Upsert(ctx, doc("5", 6, chunks("e")))
	require.NoError(t, err)
	require.True(t, out.Applied)

	n, err = s.Truncate(ctx, "public.articles", ver(5), time.Time{})
	require.NoError(t, err)
	require.Equal(t, 0, n, "replayed truncate")

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, sink.Stats{Documents: 3, Deleted: 3, Chunks: 5, CacheEntries: 5}, st)
}

// TestTruncatePages: a table larger than a page is truncated page by page
// with the same outcome as in one read: every live document at or below the
// version goes, later ones and other tables stay, tombstones take the fence.
func TestTruncatePages(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	sink.SetTruncatePageRowsForTest(s, 3)
	ctx := context.Background()

	var wantLeft []string
	for i := range 11 {
		key := fmt.Sprintf("k%02d", i)
		v := uint64(1 + i%3)
		if i%4 == 3 {
			v = 9 // written after the truncate
			wantLeft = append(wantLeft, "public.articles/"+key+"#0")
		}
		_, err := s.Upsert(ctx, doc(key, v, chunks("text "+key)))
		require.NoError(t, err)
	}
	_, err := s.Delete(ctx, "public.articles", "k99", ver(1), time.Time{})
	require.NoError(t, err)

	n, err := s.Truncate(ctx, "public.articles", ver(5), time.Time{})
	require.NoError(t, err)
	require.Equal(t, 11-len(wantLeft), n)

	hits, err := s.Search(ctx, vecFor("text k00"), sink.Query{K: 20})
	require.NoError(t, err)
	require.ElementsMatch(t, wantLeft, hitIDs(hits))
	// The tombstone on the last page took the truncate's version: a change
	// between its old version and the truncate's stays out.
	out, err := s.Upsert(ctx, doc("k99", 4, chunks("late")))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)
	n, err = s.Truncate(ctx, "public.articles", ver(5), time.Time{})
	require.NoError(t, err)
	require.Zero(t, n, "replayed truncate")
}
