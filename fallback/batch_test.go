package fallback

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// One XREADGROUP batch holding every kind of entry goes through the
// one-pipeline hit path: hits, a repeated id, a miss, an invalid request and
// one with nowhere to reply. Each answerable id gets exactly one reply with
// the right source, and nothing is left pending.
func TestBatchOfMixedRequests(t *testing.T) {
	b := setup(t, func(c *Config) { c.Workers = 1; c.BatchSize = 32 })
	stop := run(t, b.fd)
	warm, err := b.search(t, Query{Text: "cosine search fast", K: 2})
	require.NoError(t, err)
	require.Equal(t, SourceSearch, warm.Source)
	stop()

	// Queued while no front door runs, so the next one reads them in one batch.
	replyTo := b.prefix + ":reply:batch"
	pipe := b.rdb.Pipeline()
	add := func(fields ...any) {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: fields})
	}
	for i := range 5 {
		add("id", fmt.Sprint("hit-", i), "query", "cosine  search fast", "k", "2", "reply_to", replyTo)
	}
	add("id", "hit-0", "query", "cosine search fast", "k", "2", "reply_to", replyTo)
	add("id", "miss-1", "query", "bloom filters tenants", "k", "1", "reply_to", replyTo)
	add("id", "bad-1", "query", "q", "k", "0", "reply_to", replyTo)
	add("id", "lost-1", "query", "q", "k", "1")
	_, err = pipe.Exec(t.Context())
	require.NoError(t, err)

	fd := b.newFrontDoor(t, b.cfg, nil)
	run(t, fd)
	b.readReplies(t, replyTo, 7)
	b.quiesce(t)
	msgs, err := b.rdb.XRange(t.Context(), replyTo, "-", "+").Result()
	require.NoError(t, err)
	got := map[string]Result{}
	for _, m := range msgs {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		_, dup := got[r.ID]
		require.False(t, dup, "%s answered twice", r.ID)
		got[r.ID] = r
	}
	require.Len(t, got, 7)
	for i := range 5 {
		r := got[fmt.Sprint("hit-", i)]
		require.Equal(t, SourceCache, r.Source)
		require.Equal(t, warm.Hits, r.Hits)
	}
	require.Equal(t, SourceSearch, got["miss-1"].Source)
	require.Equal(t, StatusError, got["bad-1"].Status)
	require.Contains(t, got["bad-1"].Reason, "k: 0 is outside")
	require.EqualValues(t, 2, b.searcher.searches.Load(), "the warm-up and the one miss")
	// The repeated hit-0 is a cache hit too, whose reply the script dropped.
	require.EqualValues(t, 6, counter(t, fd.metrics, outcomeHit))
	require.EqualValues(t, 1, counter(t, fd.metrics, outcomeDuplicate))
	require.EqualValues(t, 2, counter(t, fd.metrics, outcomeInvalid), "bad-1 and lost-1")
}

// A miss in flight does not hold up the hits read after it: the worker keeps
// reading while its searches run.
func TestSlowMissDoesNotBlockHits(t *testing.T) {
	b := setup(t, func(c *Config) { c.Workers = 1; c.SearchTimeout = 10 * time.Second })
	run(t, b.fd)
	_, err := b.search(t, Query{Text: "cosine search fast", K: 2})
	require.NoError(t, err)

	release := make(chan struct{})
	b.searcher.gate.Store(&release)
	slow := make(chan error, 1)
	go func() {
		_, err := b.search(t, Query{Text: "bloom filters tenants", K: 1})
		slow <- err
	}()
	require.Eventually(t, func() bool { return b.searcher.waiting.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	for range 3 {
		r, err := b.search(t, Query{Text: "cosine search fast", K: 2})
		require.NoError(t, err)
		require.Equal(t, SourceCache, r.Source)
	}
	close(release)
	require.NoError(t, <-slow)
}

// A client that cannot reach Redis says so at once instead of waiting for a
// reply until its context ends.
func TestClientSendErrorIsReturned(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := NewClient(rdb, "nowhere")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Search(ctx, Query{Text: "anyone", K: 1})
	require.ErrorContains(t, err, "send request")
	require.NotErrorIs(t, err, ErrNoReply)
	require.Less(t, time.Since(start), 20*time.Second)
	require.Error(t, c.Close(), "the reply stream cannot be deleted either")
}

// readCounter counts the XREADGROUPs on one stream, sent alone and sent
// inside a pipeline.
type readCounter struct {
	stream       string
	alone, piped atomic.Int64
}

func (h *readCounter) reads(cmd redis.Cmder) bool {
	return cmd.Name() == "xreadgroup" && slices.Contains(cmd.Args(), any(h.stream))
}

func (h *readCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.reads(cmd) {
			h.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.reads(cmd) {
				h.piped.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// A backlog of hits costs one round trip per batch: the read of each next
// batch goes in the pipeline that answers the batch before it, and only the
// first read (and the one that finds the stream empty) goes alone.
func TestNextReadRidesWithTheHits(t *testing.T) {
	b := setup(t, func(c *Config) { c.Workers = 1; c.BatchSize = 10; c.BlockTimeout = 2 * time.Second })
	stop := run(t, b.fd)
	_, err := b.search(t, Query{Text: "cosine search fast", K: 2})
	require.NoError(t, err)
	stop()

	replyTo := b.prefix + ":reply:ride"
	pipe := b.rdb.Pipeline()
	for i := range 40 {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: []any{
			fieldID, fmt.Sprint("ride-", i), fieldQuery, "cosine search fast", fieldK, "2", fieldReplyTo, replyTo}})
	}
	_, err = pipe.Exec(t.Context())
	require.NoError(t, err)

	// A front door on a client of its own, so only its reads are counted.
	rdb := redis.NewClient(b.rdb.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &readCounter{stream: b.fd.keys.requests()}
	rdb.AddHook(counter)
	fd, err := NewFrontDoor(b.cfg, rdb, b.emb, b.searcher, prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	stop = run(t, fd)
	replies := b.readReplies(t, replyTo, 40)
	b.quiesce(t)
	stop()

	require.Len(t, replies, 40)
	for _, m := range replies {
		require.Equal(t, "ok", m.Values["status"])
		require.Equal(t, "true", m.Values["cached"])
	}
	// 4 batches of 10: the first read alone, the next three and the empty
	// fourth ride in the batches' pipelines; then one blocking read (two if
	// it timed out while the test looked).
	require.GreaterOrEqual(t, counter.piped.Load(), int64(4), "reads that rode in a pipeline")
	require.LessOrEqual(t, counter.alone.Load(), int64(3), "reads sent alone")
	require.EqualValues(t, 1, b.searcher.searches.Load(), "only the warm-up searched")
}

// max_in_flight bounds the misses being searched in one process: with one
// slot, a second miss waits until the first one's search is over.
func TestMaxInFlightBoundsMisses(t *testing.T) {
	// No reclaim (min_idle a minute): on a loaded machine a held request
	// pending past the tests' short min_idle was redelivered and searched
	// again, which is not what this test is about.
	b := setup(t, func(c *Config) {
		c.Workers = 2
		c.MaxInFlight = 1
		c.SearchTimeout = 10 * time.Second
		c.MinIdle = time.Minute
	})
	run(t, b.fd)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	// Runs before the front door's stop, which waits for the held
	// searches: a failed assertion ends the test instead of hanging it.
	t.Cleanup(free)
	b.searcher.gate.Store(&release)
	done := make(chan error, 2)
	for _, q := range []string{"bloom filters tenants", "cosine search fast"} {
		go func() {
			_, err := b.search(t, Query{Text: q, K: 1})
			done <- err
		}()
	}
	require.Eventually(t, func() bool { return b.searcher.waiting.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return b.searcher.searches.Load() > 1 }, 300*time.Millisecond, 5*time.Millisecond,
		"the second miss started while the only slot was taken")
	free()
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	require.EqualValues(t, 2, b.searcher.searches.Load())
}
