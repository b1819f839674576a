package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// Opening for writing by an alias opens its target with the target's
// identity, whatever the config's model and dimensions; the handle says
// which index it is and by which name it was opened.
func TestOpenWriteResolvesAnAlias(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "docs", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "docs_v2", Model: "model-2", Dimensions: 8, SkipFullText: true})
	require.NoError(t, err)
	_, err = sink.NewCatalog(b.pool, b.schema).Promote(ctx, "docs", "docs_v2", true)
	require.NoError(t, err)

	for _, mode := range []sink.Mode{sink.Write, sink.Bulk, sink.Read} {
		st, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: mode, Schema: b.schema, Index: "docs", Model: "test-model", Dimensions: dims})
		require.NoError(t, err, mode)
		require.Equal(t, sink.Identity{Name: "docs_v2", Alias: "docs", Model: "model-2", Dimensions: 8, FullText: true, Type: sink.TypeVector, HNSW: sink.HNSW{}.WithDefaults()}, st.Identity(), mode)
		// The retired index that carries the alias's name is opened by
		// its own name where that is what is meant (a shadow).
		st, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: mode, Physical: true, Schema: b.schema, Index: "docs"})
		require.NoError(t, err, mode)
		require.Equal(t, sink.Identity{Name: "docs", Model: "test-model", Dimensions: dims, FullText: true, Type: sink.TypeVector, HNSW: sink.HNSW{}.WithDefaults()}, st.Identity(), mode)
	}
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Read, Physical: true, Schema: b.schema, Index: "dcos"})
	var unknown *sink.UnknownIndexError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, "docs", unknown.Nearest)
	// Full text was switched on by the writers above (SkipFullText false);
	// a writer that keeps the index's own setting never switches it.
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "docs_v2", SkipFullText: true})
	require.NoError(t, err)
	kept, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "docs_v2", KeepFullText: true})
	require.NoError(t, err)
	require.Equal(t, sink.Identity{Name: "docs_v2", Model: "model-2", Dimensions: 8, Type: sink.TypeVector, HNSW: sink.HNSW{}.WithDefaults()}, kept.Identity(),
		"an existing index opened without model and dimensions keeps its own; KeepFullText keeps its full-text setting")
	var fullText bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT full_text FROM indexes WHERE name = 'docs_v2'").Scan(&fullText))
	require.False(t, fullText)
}

// Beside existing indexes an unknown name is refused unless Create says
// it is a new index: a typo would otherwise apply changes to an empty index
// nothing reads. In a schema without indexes, the first is created.
func TestOpenWriteRefusesAnUnknownNameBesideOthers(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "artciles", Model: "test-model", Dimensions: dims})
	var unknown *sink.UnknownIndexError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, "articles", unknown.Nearest)
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Bulk, Schema: b.schema, Index: "artciles", Model: "test-model", Dimensions: dims})
	require.ErrorAs(t, err, &unknown)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM indexes").Scan(&n))
	require.Equal(t, 1, n, "nothing registered")

	st, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "artciles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	require.Equal(t, "artciles", st.Identity().Name)

	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.ErrorIs(t, err, sink.ErrInvalidConfig, "the mode is required")
}

// In Write mode each Upsert is durable when it returns, and Flush and
// Finish have nothing to do.
func TestWriteModeFlushIsANoOp(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	require.Equal(t, sink.Write, s.Mode())
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a")))
	require.NoError(t, err)
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.Finish(ctx, sink.BuildOptions{}))
	require.Equal(t, sink.Write, s.Mode())
	_, found, err := s.Document(ctx, sink.DocID("public.articles", "1"))
	require.NoError(t, err)
	require.True(t, found)
}
