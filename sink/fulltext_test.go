package sink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// TestSkipFullText: with full text off the chunks carry no tsvector and
// SearchText says so instead of finding nothing; opening the index with it
// on again fills what was written meanwhile, so every chunk is found.
func TestSkipFullText(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	open := func(skip bool) *sink.Store {
		s, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims, SkipFullText: skip})
		require.NoError(t, err)
		return s
	}
	nullTSV := func() (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.chunks WHERE tsv IS NULL", b.schema)).Scan(&n))
		return n
	}

	on := open(false)
	_, err := on.Upsert(ctx, doc("1", 1, chunks("alpha")))
	require.NoError(t, err)
	require.Zero(t, nullTSV(), "full text on writes every tsvector")

	off := open(true)
	_, err = off.Upsert(ctx, doc("2", 1, chunks("beta", "gamma")))
	require.NoError(t, err)
	// A reformatted text rewrites the row: its old tsvector must not stay.
	cs := chunks("alpha")
	cs[0].Text = "text  of alpha"
	_, err = off.Upsert(ctx, doc("1", 2, cs))
	require.NoError(t, err)
	require.Equal(t, 3, nullTSV())
	_, err = off.SearchText(ctx, "beta", sink.Query{K: 5})
	require.ErrorIs(t, err, sink.ErrFullTextOff)
	require.ErrorContains(t, err, "postgres.full_text")

	on = open(false)
	require.Zero(t, nullTSV(), "switching full text on fills the chunks written without it")
	for _, word := range []string{"alpha", "beta", "gamma"} {
		hits, err := on.SearchText(ctx, word, sink.Query{K: 5})
		require.NoError(t, err)
		require.Len(t, hits, 1, word)
	}
}
