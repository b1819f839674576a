package fallback

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// otherIndex is the searcher of another physical index (8 dimensions): it
// refuses a vector of any other size, which is what mixing one index's
// query embedding with another index's search would send.
type otherIndex struct{ dims int }

func (s otherIndex) Search(_ context.Context, vec []float32, q sinkQuery) ([]sinkHit, error) {
	if len(vec) != s.dims {
		return nil, fmt.Errorf("vector has %d dimensions, index wants %d", len(vec), s.dims)
	}
	return []sinkHit{{DocID: "public.articles/1", Table: "public.articles", Key: "1", Text: "from articles_v2", Score: 0.5}}, nil
}

func (s otherIndex) SearchText(context.Context, string, sinkQuery) ([]sinkHit, error) {
	return []sinkHit{{DocID: "public.articles/1", Text: "from articles_v2 (full text)"}}, nil
}

// After SetTarget, answers come from the new index, with its own query
// embedding, and no cached answer of the old index is served: result and
// embedding keys carry the physical index, with or without a generation
// bump (a replica that has not switched yet keeps its own keys).
func TestSetTargetNeverCrossesIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	run(t, b.fd)
	q := Query{Text: "redis streams workers", K: 2}
	first, err := b.search(t, q)
	require.NoError(t, err)
	require.NotEmpty(t, first.Hits)
	again, err := b.search(t, q)
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, "articles", b.fd.Target())

	v2emb := &testEmbedder{dims: 8}
	b.fd.SetTarget("articles_v2", v2emb, otherIndex{dims: 8})
	require.Equal(t, "articles_v2", b.fd.Target())
	res, err := b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status, res.Reason)
	require.False(t, res.Cached, "the old index's cached answer must not be served")
	require.Len(t, res.Hits, 1)
	require.Equal(t, "from articles_v2", res.Hits[0].Text)
	require.EqualValues(t, 1, v2emb.calls.Load(), "the query was embedded with the new index's model")

	// Back: the old index's answer is still right for it.
	b.fd.SetTarget("articles", b.emb, b.searcher)
	back, err := b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, first.Hits, back.Hits)
	require.True(t, back.Cached)
	_, err = BumpGeneration(context.Background(), b.rdb, b.prefix, "articles")
	require.NoError(t, err)
	bumped, err := b.search(t, q)
	require.NoError(t, err)
	require.False(t, bumped.Cached, "a generation bump drops fresh answers")
	require.Equal(t, first.Hits, bumped.Hits)
}
