package sink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// groupRun writes docs concurrently through a store whose group slots are
// held until every document has queued, in docs' order, so they go in one
// group (as far as the group's rules allow), and returns each document's
// result in docs' order.
func groupRun(t *testing.T, s *sink.Store, docs []sink.Document) ([]sink.Outcome, []error) {
	t.Helper()
	queued, release := sink.HoldGroupSlotsForTest(s)
	outs := make([]sink.Outcome, len(docs))
	errs := make([]error, len(docs))
	var wg sync.WaitGroup
	for i, d := range docs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.Upsert(context.Background(), d)
		}()
		require.Eventually(t, func() bool { return queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	release()
	wg.Wait()
	return outs, errs
}

func groupStore(t *testing.T) (*sink.Store, *testBundle, *prometheus.Registry) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	reg := prometheus.NewRegistry()
	s, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "articles", Model: "test-model", Dimensions: dims,
		Groups: 1, GroupDocuments: 32, Registerer: reg})
	require.NoError(t, err)
	return s, &testBundle{pool: pool, schema: schema}, reg
}

// TestGroupGivesEachDocumentItsOwnOutcome writes, in one group
// transaction, new documents, an edit, a stale change, a duplicate and a
// document whose cached vector is missing: each must get the outcome it
// gets alone, and only the missing vector's document fails.
func TestGroupGivesEachDocumentItsOwnOutcome(t *testing.T) {
	s, b, reg := groupStore(t)
	ctx := context.Background()
	for _, d := range []sink.Document{doc("edited", 1, chunks("e1", "e2")), doc("stale", 5, chunks("s1")), doc("dup", 2, chunks("d1"))} {
		_, err := s.Upsert(ctx, d) // alone: nothing else is queued
		require.NoError(t, err)
	}
	missing := chunks("m1")
	missing[0].Vector = nil // not cached either
	docs := []sink.Document{
		doc("new1", 1, chunks("n1", "n2", "shared")),
		doc("new2", 1, chunks("shared", "n3")),
		doc("edited", 2, chunks("e1", "e3")),
		doc("stale", 4, chunks("s2")),
		doc("dup", 2, chunks("d1")),
		doc("missing", 1, missing),
	}
	outs, errs := groupRun(t, s, docs)
	for i, d := range docs {
		if d.Key == "missing" {
			require.ErrorIs(t, errs[i], sink.ErrMissingVector)
			continue
		}
		require.NoError(t, errs[i], d.Key)
	}
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 3}, outs[0])
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 2}, outs[1])
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1, Unchanged: 1, Removed: 1}, outs[2])
	require.Equal(t, sink.Outcome{Stale: true}, outs[3])
	require.Equal(t, sink.Outcome{Duplicate: true}, outs[4])

	hashes := func(key string) []string {
		var out []string
		for _, r := range chunkRows(t, b, sink.DocID("public.articles", key)) {
			out = append(out, r.Hash)
		}
		return out
	}
	require.Equal(t, []string{"n1", "n2", "shared"}, hashes("new1"))
	require.Equal(t, []string{"shared", "n3"}, hashes("new2"))
	require.Equal(t, []string{"e1", "e3"}, hashes("edited"))
	require.Equal(t, []string{"s1"}, hashes("stale"))
	require.Empty(t, hashes("missing"))
	var cached int
	require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.embedding_cache WHERE content_hash = 'shared'", b.schema)).Scan(&cached))
	require.Equal(t, 1, cached, "a vector two documents of the group carry is cached once")

	// One transaction wrote the six documents.
	require.Equal(t, 1, testutil.CollectAndCount(reg, "ragsync_sink_group_documents"))
	require.InDelta(t, 6, histogramSum(t, reg, "ragsync_sink_group_documents"), 0)
	require.Equal(t, 0.0, testutil.ToFloat64(counter(t, reg, "ragsync_sink_group_fallbacks_total")))
}

// TestGroupRollsBackToDocumentsAlone makes one document of a group fail
// in Postgres (text that is not UTF-8), which rolls back the group's
// transaction: every other document must still be written, alone, and
// only the bad one fails.
func TestGroupRollsBackToDocumentsAlone(t *testing.T) {
	s, b, reg := groupStore(t)
	bad := chunks("bad")
	bad[0].Text = "caf\xe9" // Latin-1: Postgres refuses it (22021)
	docs := []sink.Document{doc("a", 1, chunks("a1")), doc("bad", 1, bad), doc("c", 1, chunks("c1", "c2"))}
	outs, errs := groupRun(t, s, docs)
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.NoError(t, errs[2])
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1}, outs[0])
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 2}, outs[2])
	require.Len(t, chunkRows(t, b, sink.DocID("public.articles", "a")), 1)
	require.Len(t, chunkRows(t, b, sink.DocID("public.articles", "c")), 2)
	require.Empty(t, chunkRows(t, b, sink.DocID("public.articles", "bad")))
	require.Equal(t, 1.0, testutil.ToFloat64(counter(t, reg, "ragsync_sink_group_fallbacks_total")))
}

// TestGroupKeepsEachDocumentsChangesInOrder queues two versions of one
// document with another: the group takes the first and the other document,
// and the second version waits for a transaction of its own, so the newer
// version is the one stored and no transaction had to roll back.
func TestGroupKeepsEachDocumentsChangesInOrder(t *testing.T) {
	s, b, reg := groupStore(t)
	docs := []sink.Document{doc("x", 1, chunks("x1")), doc("y", 1, chunks("y1")), doc("x", 2, chunks("x2"))}
	_, errs := groupRun(t, s, docs)
	for _, err := range errs {
		require.NoError(t, err)
	}
	rows := chunkRows(t, b, sink.DocID("public.articles", "x"))
	require.Len(t, rows, 1)
	require.Equal(t, "x2", rows[0].Hash)
	require.InDelta(t, 2, histogramSum(t, reg, "ragsync_sink_group_documents"), 0, "x@1 and y together, x@2 alone")
	require.Equal(t, 0.0, testutil.ToFloat64(counter(t, reg, "ragsync_sink_group_fallbacks_total")))
}

func counter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "absent"}, func() float64 { return 0 })
}

func histogramSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// TestGroupNeverWaitsOnATruncateFenceHoldingRows plays a Truncate that
// holds its table's fence row and then wants a document's row, against a
// group that holds that document's row and wants the fence for a new
// document. The group must give way at once (its documents are then
// written alone, after the truncate), instead of waiting into a deadlock
// that Postgres would break by failing one of the two.
func TestGroupNeverWaitsOnATruncateFenceHoldingRows(t *testing.T) {
	s, b, reg := groupStore(t)
	ctx := context.Background()
	_, err := s.Upsert(ctx, doc("a", 1, chunks("a1")))
	require.NoError(t, err)
	_, err = s.Truncate(ctx, "public.articles", ver(0), docTime) // the fence row exists
	require.NoError(t, err)

	// The truncate's side: the fence row first, then document a's row,
	// once the group holds it.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s.truncations WHERE source_table = 'public.articles' FOR UPDATE", b.schema))
	require.NoError(t, err)
	// This side looks for a deadlock first (the group's wait, if any,
	// began earlier and looks after the default second), so if the two
	// ever wait on each other it is this transaction that fails.
	_, err = tx.Exec(ctx, "SET LOCAL deadlock_timeout = '100ms'")
	require.NoError(t, err)
	truncErr := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the group locks a's row meanwhile
		_, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s.documents WHERE id = $1 FOR UPDATE", b.schema), sink.DocID("public.articles", "a"))
		if err == nil {
			err = tx.Commit(ctx)
		}
		truncErr <- err
	}()
	outs, errs := groupRun(t, s, []sink.Document{doc("a", 2, chunks("a2")), doc("b", 2, chunks("b1"))})
	require.NoError(t, <-truncErr, "the truncate's transaction must not be the deadlock's victim")
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.True(t, outs[0].Applied)
	require.True(t, outs[1].Applied)
	require.Equal(t, 1.0, testutil.ToFloat64(counter(t, reg, "ragsync_sink_group_fallbacks_total")))
}

// TestLookupsInOneRoundTripAnswerAsAlone looks up documents together (a
// stored one, one the index never saw, one deleted, one asked twice) and
// checks each answer equals the same Lookup made alone.
func TestLookupsInOneRoundTripAnswerAsAlone(t *testing.T) {
	s, b, _ := groupStore(t)
	ctx := context.Background()
	alone, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims, GroupDocuments: 1})
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("a", 3, chunks("a1", "a2", "a3")))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("gone", 1, chunks("g1")))
	require.NoError(t, err)
	_, err = s.Delete(ctx, "public.articles", "gone", ver(2), docTime)
	require.NoError(t, err)
	require.NoError(t, s.CacheVectors(ctx, []string{"other"}, []string{"text of other"}, [][]float32{vecFor("other")}, ""))

	type ask struct {
		key    string
		hashes []string
	}
	asks := []ask{
		{"a", []string{"a1", "new", "a3"}},
		{"never", []string{"other", "a2", "absent"}},
		{"gone", []string{"g1"}},
		{"a", []string{"a2"}},
		{"never", nil},
	}
	queued, release := sink.HoldLookupSlotsForTest(s)
	got := make([]sink.Lookup, len(asks))
	errs := make([]error, len(asks))
	var wg sync.WaitGroup
	for i, a := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Lookup(ctx, sink.DocID("public.articles", a.key), a.hashes)
		}()
		require.Eventually(t, func() bool { return queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	release()
	wg.Wait()
	for i, a := range asks {
		require.NoError(t, errs[i], a.key)
		want, err := alone.Lookup(ctx, sink.DocID("public.articles", a.key), a.hashes)
		require.NoError(t, err)
		require.Equal(t, want, got[i], "%s %v", a.key, a.hashes)
	}
	require.True(t, got[0].Found)
	require.Len(t, got[0].Chunks, 3)
	require.Equal(t, map[string]bool{"a1": true, "a3": true}, got[0].Cached)
	require.False(t, got[1].Found)
	require.Equal(t, map[string]bool{"other": true, "a2": true}, got[1].Cached)
	require.True(t, got[2].Doc.Deleted)
}
