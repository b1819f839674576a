package sink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// setupFamily opens articles (4 dimensions, from setup) and articles_v2
// (8 dimensions, another model), each holding document "a" (and v2 "b").
func setupFamily(t *testing.T) (*sink.Store, *sink.Store, *sink.Catalog, *testBundle) {
	t.Helper()
	ctx := context.Background()
	old, b := setup(t)
	v2, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "articles_v2", Model: "model-2", Dimensions: 8})
	require.NoError(t, err)
	_, err = old.Upsert(ctx, doc("a", 1, chunks("h1", "h2")))
	require.NoError(t, err)
	for _, key := range []string{"a", "b"} {
		d := doc(key, 1, chunks("h1", "h2"))
		for i := range d.Chunks {
			d.Chunks[i].Vector = append(vecFor(d.Chunks[i].Hash), vecFor(d.Chunks[i].Hash)...)
		}
		_, err = v2.Upsert(ctx, d)
		require.NoError(t, err)
	}
	return old, v2, sink.NewCatalog(b.pool, b.schema), b
}

func viewDims(t *testing.T, b *testBundle, view string) []int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), fmt.Sprintf("SELECT DISTINCT vector_dims(embedding) FROM %s.%s ORDER BY 1", b.schema, view))
	require.NoError(t, err)
	dims, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return dims
}

func TestPromoteRollback(t *testing.T) {
	t.Parallel()
	_, _, cat, b := setupFamily(t)
	ctx := context.Background()

	// No alias yet: the name resolves to the index of that name.
	r, found, err := cat.Resolve(ctx, "articles")
	require.NoError(t, err)
	require.True(t, found)
	require.Nil(t, r.Alias)
	require.Equal(t, "articles", r.Index.Name)
	_, found, err = cat.Resolve(ctx, "nothing")
	require.NoError(t, err)
	require.False(t, found)

	// A building index is refused, unless forced.
	require.NoError(t, cat.Follow(ctx, "articles_v2", "articles", sink.StateBuilding))
	_, err = cat.Promote(ctx, "articles", "articles_v2", false)
	require.ErrorIs(t, err, sink.ErrBuilding)
	_, err = cat.Promote(ctx, "articles", "missing", true)
	require.ErrorIs(t, err, sink.ErrNoIndex)
	_, err = cat.Rollback(ctx, "articles")
	require.ErrorIs(t, err, sink.ErrNoPrevious)

	shadows, err := cat.Shadows(ctx, "articles", "articles")
	require.NoError(t, err)
	require.Len(t, shadows, 1)
	require.Equal(t, "articles_v2", shadows[0].Name)

	require.NoError(t, cat.Follow(ctx, "articles_v2", "articles", sink.StateCaughtUp))
	a, err := cat.Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	require.Equal(t, sink.Alias{Name: "articles", Index: "articles_v2", Previous: "articles", SwitchedAt: a.SwitchedAt}, a)

	// The alias wins over the index of the same name, and takes the
	// target's model and dimensions with it.
	r, found, err = cat.Resolve(ctx, "articles")
	require.NoError(t, err)
	require.True(t, found)
	require.NotNil(t, r.Alias)
	require.Equal(t, "articles_v2", r.Index.Name)
	require.Equal(t, "model-2", r.Index.Model)
	require.Equal(t, 8, r.Index.Dimensions)
	states := map[string]string{}
	idx, err := cat.Indexes(ctx)
	require.NoError(t, err)
	for _, x := range idx {
		states[x.Name] = x.State + "/" + x.Follows
	}
	require.Equal(t, map[string]string{"articles": "retired/articles", "articles_v2": "caught-up/articles"}, states)
	require.Equal(t, []int{8}, viewDims(t, b, "articles_chunks"))
	// The retired index stays a shadow of the live one until dropped.
	shadows, err = cat.Shadows(ctx, "articles_v2", "articles")
	require.NoError(t, err)
	require.Len(t, shadows, 1)
	require.Equal(t, "articles", shadows[0].Name)
	to, err := cat.AliasesTo(ctx, "articles_v2")
	require.NoError(t, err)
	require.Equal(t, []string{"articles"}, to)

	// Promote to the current target is a no-op.
	again, err := cat.Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	require.Equal(t, a, again)

	back, err := cat.Rollback(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, "articles", back.Index)
	require.Equal(t, "articles_v2", back.Previous)
	require.Equal(t, []int{4}, viewDims(t, b, "articles_chunks"))
	r, _, err = cat.Resolve(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, "articles", r.Index.Name)
	require.Equal(t, sink.StateCaughtUp, r.Index.State)

	// Dropping the previous index clears the way back, not the alias.
	_, err = b.pool.Exec(ctx, "DELETE FROM "+b.schema+".indexes WHERE name = 'articles_v2'")
	require.NoError(t, err)
	_, err = cat.Rollback(ctx, "articles")
	require.ErrorIs(t, err, sink.ErrNoPrevious)
	aliases, err := cat.Aliases(ctx)
	require.NoError(t, err)
	require.Len(t, aliases, 1)
	require.Equal(t, "articles", aliases[0].Index)
	require.Empty(t, aliases[0].Previous)
}

// The view's embedding and predicate are the HNSW index's, so a nearest-
// neighbour query on the view can use it. Seq scans are disabled only so
// that the planner shows whether the index is usable at all on a table this
// small (where a seq scan would be cheaper).
func TestAliasViewUsesHNSW(t *testing.T) {
	t.Parallel()
	_, v2, cat, b := setupFamily(t)
	ctx := context.Background()
	for i := range 50 {
		d := doc(fmt.Sprint(i), 1, chunks(fmt.Sprintf("h%d-a", i)))
		d.Chunks[0].Vector = append(vecFor(d.Chunks[0].Hash), vecFor(d.Chunks[0].Hash)...)
		_, err := v2.Upsert(ctx, d)
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, fmt.Sprintf("ANALYZE %s.chunks; ANALYZE %s.documents", b.schema, b.schema))
	require.NoError(t, err)
	_, err = cat.Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN SELECT doc_id, position FROM "+b.schema+".articles_chunks ORDER BY embedding <=> $1 LIMIT 5",
		pgvector.NewVector(make([]float32, 8)))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "chunks_hnsw_articles_v2", plan)

	// And the recipe answers with the target's chunks only.
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT doc_id FROM "+b.schema+
		".articles_chunks ORDER BY embedding <=> $1 LIMIT 10) x", pgvector.NewVector(make([]float32, 8))).Scan(&n))
	require.Equal(t, 10, n) // articles_v2 holds 54 chunks
}

// Readers of the view during promotes and rollbacks never fail and always
// see exactly one index's rows (one dimension count).
func TestAliasViewSwitchIsAtomic(t *testing.T) {
	t.Parallel()
	_, _, cat, b := setupFamily(t)
	ctx := context.Background()
	_, err := cat.Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				rows, err := b.pool.Query(ctx, "SELECT DISTINCT vector_dims(embedding) FROM "+b.schema+".articles_chunks")
				if err == nil {
					var dims []int
					dims, err = pgx.CollectRows(rows, pgx.RowTo[int])
					if err == nil && len(dims) != 1 {
						err = fmt.Errorf("view returned dimensions %v: a mix of indexes", dims)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 20 {
		if i%2 == 0 {
			_, err = cat.Rollback(ctx, "articles")
		} else {
			_, err = cat.Promote(ctx, "articles", "articles_v2", false)
		}
		require.NoError(t, err)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, reads.Load())
	require.Equal(t, []int{8}, viewDims(t, b, "articles_chunks")) // the last of the 20 switches promoted
}

func TestServingLocks(t *testing.T) {
	t.Parallel()
	_, _, cat, _ := setupFamily(t)
	ctx := context.Background()
	running, err := cat.ServeRunning(ctx, "articles")
	require.NoError(t, err)
	require.False(t, running)
	hold, err := cat.HoldServing(ctx, "articles", "articles")
	require.NoError(t, err)
	hold2, err := cat.HoldServing(ctx, "articles", "articles") // a second replica
	require.NoError(t, err)
	running, err = cat.ServeRunning(ctx, "articles")
	require.NoError(t, err)
	require.True(t, running)
	inUse, err := cat.PrimaryInUse(ctx, "articles")
	require.NoError(t, err)
	require.True(t, inUse)
	inUse, err = cat.PrimaryInUse(ctx, "articles_v2")
	require.NoError(t, err)
	require.False(t, inUse, "a shadow is not a serve's own index")
	running, err = cat.ServeRunning(ctx, "other")
	require.NoError(t, err)
	require.False(t, running)
	hold.Release()
	running, err = cat.ServeRunning(ctx, "articles")
	require.NoError(t, err)
	require.True(t, running, "the other replica still holds it")
	hold2.Release()
	running, err = cat.ServeRunning(ctx, "articles")
	require.NoError(t, err)
	require.False(t, running)
}

// TestServingHoldRefresh: the server ends the serving locks' connection;
// other commands stop seeing the serve until Refresh takes the locks again
// over a new connection.
func TestServingHoldRefresh(t *testing.T) {
	t.Parallel()
	_, _, cat, b := setupFamily(t)
	ctx := context.Background()
	hold, err := cat.HoldServing(ctx, "articles", "articles")
	require.NoError(t, err)
	defer hold.Release()
	require.NoError(t, hold.Refresh(ctx), "a live connection is kept")

	var ended bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", sink.ServingHoldPIDForTest(hold)).Scan(&ended))
	require.True(t, ended)
	require.Eventually(t, func() bool {
		running, err := cat.ServeRunning(ctx, "articles")
		return err == nil && !running
	}, 10*time.Second, 20*time.Millisecond, "the locks end with their backend")

	require.NoError(t, hold.Refresh(ctx))
	running, err := cat.ServeRunning(ctx, "articles")
	require.NoError(t, err)
	require.True(t, running, "Refresh took the serving lock again")
	inUse, err := cat.PrimaryInUse(ctx, "articles")
	require.NoError(t, err)
	require.True(t, inUse, "and the primary's")
}

// TestListMarksWhatQueriesRead pins which indexes List calls live: the
// configured index while no alias of its name exists, then an alias's
// target (and no longer the index the alias moved away from).
func TestListMarksWhatQueriesRead(t *testing.T) {
	t.Parallel()
	_, _, cat, _ := setupFamily(t)
	ctx := context.Background()
	states := func(configured string) map[string]string {
		t.Helper()
		stats, _, err := cat.List(ctx, configured)
		require.NoError(t, err)
		m := map[string]string{}
		for _, x := range stats {
			m[x.Name] = x.State + fmt.Sprint(x.Aliases)
		}
		return m
	}
	require.Equal(t, map[string]string{"articles": "live[]", "articles_v2": "caught-up[]"}, states("articles"))
	require.NoError(t, cat.Follow(ctx, "articles_v2", "articles", sink.StateCaughtUp))
	_, err := cat.Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	// The alias "articles" now names articles_v2; the index called
	// articles is its previous target, no longer read.
	got := states("articles")
	require.Equal(t, "live[articles]", got["articles_v2"])
	require.NotContains(t, got["articles"], "live")
	_, aliases, err := cat.List(ctx, "articles")
	require.NoError(t, err)
	require.Len(t, aliases, 1)
	require.Equal(t, "articles", aliases[0].Previous)
}
