package fallback

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// countingMarks is the store's watermark, counting how many readings and
// LISTEN connections are in progress at once.
type countingMarks struct {
	store               *sink.Store
	reads, maxReads     atomic.Int64
	listens, maxListens atomic.Int64
	totalReads          atomic.Int64
}

func raise(cur, peak *atomic.Int64) {
	n := cur.Add(1)
	for {
		p := peak.Load()
		if n <= p || peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (c *countingMarks) Watermarks(ctx context.Context) ([]sink.StoredMark, error) {
	raise(&c.reads, &c.maxReads)
	defer c.reads.Add(-1)
	c.totalReads.Add(1)
	return c.store.Watermarks(ctx)
}

func (c *countingMarks) ListenMarks(ctx context.Context, changed func()) error {
	raise(&c.listens, &c.maxListens)
	defer c.listens.Add(-1)
	return c.store.ListenMarks(ctx, changed)
}

// setupAfter is a running front door over testDocs that waits on the
// store's watermark, which starts at LSN 0/100.
func setupAfter(t *testing.T, mutate func(*Config)) (*bundle, *countingMarks) {
	t.Helper()
	b := setup(t, mutate)
	saveLSN(t, b.store, 0x100)
	cm := &countingMarks{store: b.store}
	b.fd.SetWatermark(cm)
	run(t, b.fd)
	return b, cm
}

func saveLSN(t *testing.T, st *sink.Store, lsn uint64) {
	t.Helper()
	now := time.Now()
	require.NoError(t, st.SaveMarks(context.Background(), []cdc.Mark{cdc.LSNMark("pg", lsn, now, now, false)}))
}

// waitWaiting waits until n requests wait for the watermark.
func waitWaiting(t *testing.T, fd *FrontDoor, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(fd.afterSlots) == n }, 30*time.Second, 5*time.Millisecond,
		"want %d requests waiting for the watermark", n)
}

func afterWaits(fd *FrontDoor, outcome string) float64 {
	return testutil.ToFloat64(fd.metrics.afterWaits.WithLabelValues(outcome))
}

func TestAfterAnsweredOnceWatermarkPasses(t *testing.T) {
	b, _ := setupAfter(t, nil)
	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := b.search(t, Query{Text: "pgvector embeddings", K: 3, After: "0/200", AfterTimeout: 20 * time.Second})
		done <- out{res, err}
	}()
	waitWaiting(t, b.fd, 1)
	require.Zero(t, b.searcher.searches.Load(), "no search before the watermark passes")
	select {
	case o := <-done:
		t.Fatalf("answered before the watermark passed: %+v %v", o.res, o.err)
	default:
	}
	saveLSN(t, b.store, 0x200)
	o := <-done
	require.NoError(t, o.err)
	require.Equal(t, StatusOK, o.res.Status, o.res.Reason)
	requireSearched(t, o.res)
	require.NotEmpty(t, o.res.Hits)
	require.Equal(t, 1.0, afterWaits(b.fd, afterPassed))
	// The waiter gives its slot back just after it answers.
	waitWaiting(t, b.fd, 0)

	// Already passed: answered without a wait, and from the entry the
	// search above cached after the pass.
	res, err := b.search(t, Query{Text: "pgvector embeddings", K: 3, After: "0/180", AfterTimeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	require.Equal(t, SourceCache, res.Source)
	require.Equal(t, 2.0, afterWaits(b.fd, afterPassed))
}

func TestAfterNotYetAfterTimeout(t *testing.T) {
	b, _ := setupAfter(t, nil)
	res, err := b.search(t, Query{Text: "pgvector embeddings", K: 3, After: "0/200", AfterTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, StatusNotYet, res.Status)
	require.Empty(t, res.Hits)
	require.Equal(t, SourceNone, res.Source)
	require.Contains(t, res.Reason, "the watermark is at 0/100, short of 0/200")
	require.Zero(t, b.searcher.searches.Load())
	require.Equal(t, 1.0, afterWaits(b.fd, afterNotYet))
	require.Equal(t, 1.0, counter(t, b.fd.metrics, outcomeNotYet))

	// A time the index is not through yet, checked without waiting.
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	res, err = b.search(t, Query{Text: "pgvector embeddings", K: 3, After: future, AfterTimeout: -1})
	require.NoError(t, err)
	require.Equal(t, StatusNotYet, res.Status)
	require.Contains(t, res.Reason, "pg is through")
}

// A change written after a cached answer: the answer is not given to a
// request that waits for the change, and the search that answers it finds
// the change.
func TestAfterSkipsCacheFromBeforeThePosition(t *testing.T) {
	b, cm := setupAfter(t, nil)
	q := Query{Text: "watermark lanes positions", K: 5}
	res, err := b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	for _, h := range res.Hits {
		require.NotEqual(t, sink.DocID(testTable, "9"), h.DocID)
	}
	// Cached: the same query without after is a hit.
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, SourceCache, res.Source)

	// The change lands, then its position is written (a pipeline writes
	// the mark after the sink's commit); the front door has read it.
	text := "watermark lanes positions tell readers what is searchable"
	_, err = b.store.Upsert(context.Background(), sink.Document{Table: testTable, Key: "9",
		Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}, SourceTS: time.Now(),
		Chunks: []sink.Chunk{{Position: 0, Hash: "9-0", Text: text, Tokens: 7, Vector: embedText(text)}}})
	require.NoError(t, err)
	reads := cm.totalReads.Load()
	saveLSN(t, b.store, 0x200)
	require.Eventually(t, func() bool { return cm.totalReads.Load() > reads }, 10*time.Second, 5*time.Millisecond)

	q.After = "0/200"
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	requireSearched(t, res)
	require.Equal(t, sink.DocID(testTable, "9"), res.Hits[0].DocID, "the answer holds the change it waited for")
}

func TestAfterInvalid(t *testing.T) {
	b, _ := setupAfter(t, nil)
	for _, tc := range []struct {
		name   string
		fields []any
		want   string
	}{
		{"not a position", []any{fieldAfter, "yesterday"}, "invalid request: after: \"yesterday\" is neither a position (a Postgres LSN such as 16/B374D848"},
		{"bad timeout", []any{fieldAfter, "0/10", fieldAfterWait, "soon"}, "invalid request: after_timeout_ms: \"soon\" is not a number"},
		{"timeout alone", []any{fieldAfterWait, "100"}, "invalid request: after_timeout_ms: given without after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replyTo := b.prefix + ":reply:" + tc.name
			b.sendRaw(t, append([]any{fieldID, "req-1", fieldQuery, "pgvector", fieldK, "3", fieldReplyTo, replyTo}, tc.fields...)...)
			msgs := b.readReplies(t, replyTo, 1)
			res, err := parseReply(msgs[0].Values)
			require.NoError(t, err)
			require.Equal(t, StatusError, res.Status)
			require.Contains(t, res.Reason, tc.want)
		})
	}
	require.Zero(t, b.searcher.searches.Load())
}

// Many requests wait for one position: they hold neither in-flight slots
// (other requests are answered meanwhile) nor connections (one LISTEN and
// one reading at a time for all), and all are answered when it passes,
// searching at most max_in_flight at a time.
func TestAfterManyWaitersShareOneListen(t *testing.T) {
	const waiters = 60
	b, cm := setupAfter(t, func(c *Config) { c.MaxInFlight = 4 })
	b.searcher.delay = 20 * time.Millisecond // searches overlap when they are not bounded
	var wg sync.WaitGroup
	results := make([]Result, waiters)
	errs := make([]error, waiters)
	for i := range waiters {
		wg.Go(func() {
			results[i], errs[i] = b.search(t, Query{Text: fmt.Sprintf("pgvector embeddings %d", i), K: 2, After: "0/300", AfterTimeout: 25 * time.Second})
		})
	}
	waitWaiting(t, b.fd, waiters)
	res, err := b.search(t, Query{Text: "bloom filters", K: 2})
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status, "a request without after is answered while the others wait")

	saveLSN(t, b.store, 0x300)
	wg.Wait()
	for i := range waiters {
		require.NoError(t, errs[i])
		require.Equal(t, StatusOK, results[i].Status, results[i].Reason)
		require.NotEmpty(t, results[i].Hits)
	}
	require.Equal(t, int64(1), cm.maxListens.Load(), "one LISTEN connection for every waiter")
	require.Equal(t, int64(1), cm.maxReads.Load(), "one reading of the watermark at a time for every waiter")
	require.Equal(t, float64(waiters), afterWaits(b.fd, afterPassed))
	require.LessOrEqual(t, b.searcher.peak.Load(), int64(4), "searches at once, against max_in_flight")
}

// A request with after whose search keeps failing is dead-lettered and
// answered with an error, never with the stale answer kept from before.
func TestAfterNoStaleAnswerFromDeadLetters(t *testing.T) {
	b, _ := setupAfter(t, func(c *Config) { c.MinIdle = 200 * time.Millisecond })
	rebuildBloomFromTestDocs(t, b.fd) // the document map stale answers are checked against
	q := Query{Text: "pgvector embeddings", K: 3}
	res, err := b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)

	// Without after, the failure is answered from the stale store.
	b.searcher.fail.Store(true)
	_, err = b.rdb.Incr(context.Background(), b.fd.keys.generation()).Result()
	require.NoError(t, err)
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusDegraded, res.Status)
	require.Equal(t, SourceStale, res.Source)

	q.After = "0/100"
	res, err = b.search(t, q)
	var re *ReplyError
	require.ErrorAs(t, err, &re)
	require.Equal(t, StatusError, res.Status)
	require.Empty(t, res.Hits)
	require.Contains(t, res.Reason, "a request with after gets no degraded answer")
}
