package sink_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ChunkIDs, ChunkVectors and NewestDebt read the index's own chunks: every
// chunk by default, the chosen ones (repeats included) by id, and the
// database's now when nothing is owed.
func TestChunkVectors(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)

	ids, err := s.ChunkIDs(ctx)
	require.NoError(t, err)
	require.Len(t, ids, 2)

	all, err := s.ChunkVectors(ctx, nil)
	require.NoError(t, err)
	var texts []string
	for _, c := range all {
		texts = append(texts, c.Text)
		require.Equal(t, vecFor(c.Text[len("text of "):]), c.Vector, "the stored vector of %s", c.Text)
	}
	sort.Strings(texts)
	require.Equal(t, []string{"text of a", "text of b"}, texts)

	picked, err := s.ChunkVectors(ctx, []int64{ids[0], ids[0]})
	require.NoError(t, err)
	require.Len(t, picked, 2, "an id drawn twice is read twice")
	require.Equal(t, picked[0], picked[1])

	none, err := s.ChunkVectors(ctx, []int64{})
	require.NoError(t, err)
	require.Empty(t, none, "an empty pick reads nothing, not everything")

	newest, err := s.NewestDebt(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), newest, time.Minute, "no debt: the database's now")
}
