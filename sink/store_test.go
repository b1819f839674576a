package sink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

func TestNewRejectsOtherModelOrDimensions(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()

	// Opening the same index again with the same settings is fine.
	_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)

	for name, cfg := range map[string]sink.Config{
		"dimensions": {Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: 8},
		"model":      {Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "other", Dimensions: dims},
	} {
		_, err := sink.OpenIndex(ctx, b.pool, cfg)
		require.ErrorIs(t, err, sink.ErrIndexMismatch, name)
		require.ErrorContains(t, err, `model "test-model" with 4 dimensions`, name)
		require.ErrorContains(t, err, "build it with ragsync reindex --to NAME", name)
	}

	// A second index with other dimensions coexists in the same tables.
	big, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "big", Model: "test-model", Dimensions: 8})
	require.NoError(t, err)
	d := doc("1", 1, []sink.Chunk{{Position: 0, Hash: "a", Text: "a", Vector: make([]float32, 8)}})
	d.Chunks[0].Vector[0] = 1
	_, err = big.Upsert(ctx, d)
	require.NoError(t, err)
	hits, err := big.Search(ctx, d.Chunks[0].Vector, sink.Query{})
	require.NoError(t, err)
	require.Len(t, hits, 1)

	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Index: "Bad Name", Model: "m", Dimensions: 4})
	require.ErrorIs(t, err, sink.ErrInvalidConfig)
}

func TestNewOnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Schema(t)
	_, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: sink.Write, Schema: "no_such_schema_xyz", Index: "a", Model: "m", Dimensions: 4})
	require.ErrorContains(t, err, "ragsync migrate")
}

func TestOpenPoolErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("needs network")
	}
	ctx := context.Background()
	_, err := sink.OpenPool(ctx, "postgres://user:s3cret@127.0.0.1:1/db?connect_timeout=2", "ragsync")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	require.ErrorContains(t, err, "make services")
	require.ErrorContains(t, err, "127.0.0.1:1")

	_, err = sink.OpenPool(ctx, pgtest.URL(), "Bad-Schema")
	require.Error(t, err)

	_, err = sink.OpenPool(ctx, "postgres://u:s3cret@h:notaport/db", "ragsync")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestConcurrentUpsertsConverge(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	const writers = 8
	for round := range 3 {
		key := fmt.Sprint("doc", round)
		var wg sync.WaitGroup
		outs := make([]sink.Outcome, writers)
		errs := make([]error, writers)
		for w := range writers {
			wg.Go(func() {
				// Every writer brings other content at its own version; some
				// share paragraphs, so cache rows are contended too.
				v := uint64(w + 1)
				cs := chunks(fmt.Sprintf("shared-%d", w%2), fmt.Sprintf("own-%d", w), "common")
				outs[w], errs[w] = s.Upsert(ctx, doc(key, v, cs))
			})
		}
		wg.Wait()
		applied := 0
		for w := range writers {
			require.NoError(t, errs[w])
			if outs[w].Applied {
				applied++
			}
		}
		require.GreaterOrEqual(t, applied, 1)
		sd, ok, err := s.Document(ctx, "public.articles/"+key)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, ver(writers), sd.Version, "highest version wins")
		require.Equal(t, []string{"shared-1", fmt.Sprint("own-", writers-1), "common"}, sd.Hashes)
		require.Len(t, chunkRows(t, b, "public.articles/"+key), 3)
	}
}
