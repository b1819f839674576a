package sink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func hnswExists(t *testing.T, b *testBundle) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'chunks_hnsw_articles')", b.schema).Scan(&ok))
	return ok
}

// openBulk opens the test index of b in Bulk mode.
func openBulk(t *testing.T, b *testBundle) (*sink.Store, error) {
	t.Helper()
	return sink.OpenIndex(context.Background(), b.pool, sink.Config{Mode: sink.Bulk, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
}

func TestBulkLoadsAnEmptyIndexThenBuildsHNSW(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	require.True(t, hnswExists(t, b))
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	require.Equal(t, sink.Bulk, bulk.Mode())
	require.False(t, hnswExists(t, b), "the HNSW index is built after the load, not maintained during it")

	_, err = bulk.Upsert(ctx, doc("1", 10, chunks("a", "b")))
	require.NoError(t, err)
	// A chunk whose vector the caller did not carry: known from this load.
	shared := chunks("b", "c")
	shared[0].Vector = nil
	_, err = bulk.Upsert(ctx, doc("2", 10, shared))
	require.NoError(t, err)
	_, found, err := s.Document(ctx, sink.DocID("public.articles", "1"))
	require.NoError(t, err)
	require.False(t, found, "Upsert only buffers")
	// The bulk handle's reads see what it buffered.
	got1, found, err := bulk.Document(ctx, sink.DocID("public.articles", "1"))
	require.NoError(t, err)
	require.True(t, found, "a buffered document is read from the buffer")
	require.Equal(t, []string{"a", "b"}, got1.Hashes)
	l, err := bulk.Lookup(ctx, sink.DocID("public.articles", "2"), []string{"b", "c", "z"})
	require.NoError(t, err)
	require.True(t, l.Found)
	require.Equal(t, ver(10), l.Doc.Version)
	require.Len(t, l.Chunks, 2)
	require.Equal(t, "b", l.Chunks[0].VectorHash)
	require.True(t, l.Chunks[0].OriginCached)
	require.Equal(t, map[string]bool{"b": true, "c": true}, l.Cached)
	sc, err := bulk.StoredChunks(ctx, sink.DocID("public.articles", "2"))
	require.NoError(t, err)
	require.Equal(t, l.Chunks, sc)
	got, err := bulk.Vectors(ctx, []string{"b", "z"})
	require.NoError(t, err)
	require.Contains(t, got, "b")
	require.NotContains(t, got, "z")

	require.NoError(t, bulk.Flush(ctx))
	require.Equal(t, []chunkRow{{0, "a", ""}, {1, "b", ""}}, stripXmin(chunkRows(t, b, sink.DocID("public.articles", "1"))))
	require.Equal(t, []chunkRow{{0, "b", ""}, {1, "c", ""}}, stripXmin(chunkRows(t, b, sink.DocID("public.articles", "2"))))
	cached, err := s.Vectors(ctx, []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Len(t, cached, 3, "bulk-loaded vectors enter the embedding cache")

	// A document a streamed change wrote meanwhile keeps the fenced path:
	// the newer stored version wins over the buffered older one.
	_, err = s.Upsert(ctx, doc("3", 50, chunks("n")))
	require.NoError(t, err)
	_, err = bulk.Upsert(ctx, doc("3", 20, chunks("o")))
	require.NoError(t, err)
	stored, _, err := bulk.Document(ctx, sink.DocID("public.articles", "3"))
	require.NoError(t, err)
	require.Equal(t, ver(50), stored.Version, "a buffered version older than the stored one is not what reads see")
	require.NoError(t, bulk.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1}))
	require.Equal(t, sink.Write, bulk.Mode(), "after Finish the handle writes document by document")
	require.Equal(t, []chunkRow{{0, "n", ""}}, stripXmin(chunkRows(t, b, sink.DocID("public.articles", "3"))))
	require.True(t, hnswExists(t, b))
	hits, err := s.Search(ctx, vecFor("c"), sink.Query{K: 1})
	require.NoError(t, err)
	require.Equal(t, []string{sink.DocID("public.articles", "2") + "#1"}, hitIDs(hits))

	again, err := openBulk(t, b)
	require.NoError(t, err)
	require.Equal(t, sink.Write, again.Mode(), "an index holding documents is not bulk-loaded")
	require.True(t, hnswExists(t, b), "nor is its HNSW index dropped")
	_, err = again.Upsert(ctx, doc("4", 1, chunks("d")))
	require.NoError(t, err)
	_, found, err = s.Document(ctx, sink.DocID("public.articles", "4"))
	require.NoError(t, err)
	require.True(t, found, "in Write mode Upsert is durable when it returns")
	require.NoError(t, again.Flush(ctx))
}

func TestBulkErrors(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	missing := chunks("m")
	missing[0].Vector = nil
	_, err = bulk.Upsert(ctx, doc("1", 1, missing))
	require.NoError(t, err)
	require.ErrorIs(t, bulk.Flush(ctx), sink.ErrMissingVector)
	_, err = bulk.Upsert(ctx, sink.Document{Table: "public.articles", Key: "x"})
	require.Error(t, err, "a document without a version is refused at once")
	require.ErrorIs(t, bulk.Finish(ctx, sink.BuildOptions{}), sink.ErrMissingVector, "a failed document stays buffered, so Finish fails too")

	_, b2 := setup(t)
	bulk2, err := openBulk(t, b2)
	require.NoError(t, err)
	require.ErrorContains(t, bulk2.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "lots"}), `check maintenance_work_mem "lots"`)
}

func stripXmin(rows []chunkRow) []chunkRow {
	for i := range rows {
		rows[i].Xmin = ""
	}
	return rows
}

// TestBulkFlushesWhileDocumentsArrive: the continuous pipeline goes on
// buffering documents while a page is flushed, so a flush must not read
// the buffer that Upsert writes (the race detector checks it) and every
// document must be written by some flush.
func TestBulkFlushesWhileDocumentsArrive(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	const writers, each = 4, 50
	const docs = writers * each
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w * each; i < (w+1)*each; i++ {
				// The second chunk repeats the first document's, whose
				// vector it does not carry: known from this load.
				cs := chunks(fmt.Sprintf("p%d", i), fmt.Sprintf("q%d", w*each))
				if i > w*each {
					cs[1].Vector = nil
				}
				_, err := bulk.Upsert(ctx, doc(fmt.Sprint(i), 10, cs))
				assert.NoError(t, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for flushing := true; flushing; {
		select {
		case <-done:
			flushing = false
		default:
		}
		require.NoError(t, bulk.Flush(ctx))
	}
	require.NoError(t, bulk.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1}))
	for i := range docs {
		_, found, err := s.Document(ctx, sink.DocID("public.articles", fmt.Sprint(i)))
		require.NoError(t, err)
		require.True(t, found, "document %d was flushed", i)
	}
}

// A bulk load ends with the planner's statistics of the chunks and
// documents tables gathered: without them the planner knows nothing of
// the rows just loaded and can plan a sort of every chunk instead of the
// HNSW scan (autovacuum, off on the test server, would analyze them only
// later).
func TestBulkFinishAnalyzesTheTables(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	analyzed := func() map[string]bool {
		rows, err := b.pool.Query(ctx, "SELECT relname, last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables"+
			" WHERE schemaname = $1 AND relname IN ('chunks', 'documents')", b.schema)
		require.NoError(t, err)
		out := map[string]bool{}
		for rows.Next() {
			var name string
			var done bool
			require.NoError(t, rows.Scan(&name, &done))
			out[name] = done
		}
		require.NoError(t, rows.Err())
		return out
	}
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	for i := range 50 {
		_, err = bulk.Upsert(ctx, doc(fmt.Sprint(i), 10, chunks(fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i))))
		require.NoError(t, err)
	}
	require.NoError(t, bulk.Flush(ctx))
	require.Equal(t, map[string]bool{"chunks": false, "documents": false}, analyzed(), "not before Finish (else this test shows nothing)")
	require.NoError(t, bulk.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1}))
	require.Equal(t, map[string]bool{"chunks": true, "documents": true}, analyzed())
	var tuples float64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"+
		" WHERE n.nspname = $1 AND c.relname = 'documents'", b.schema).Scan(&tuples))
	require.EqualValues(t, 50, tuples, "the planner knows how many documents the load wrote")
}
