package fallback

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The issue's "with Postgres stopped, every request still gets one reply,
// degraded where a stale answer exists". The shared Postgres server must not
// be stopped, so the store's own pool is closed instead: every query then
// fails exactly as with the server gone.
func TestPostgresDownEveryRequestAnsweredOnce(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.BreakerFailures = 1000 // keep the retry → DLQ path in play for this test
		c.ReplyMaxLen = 1000
	})
	// A store on a pool of our own, so closing it leaves pgtest's alone.
	pool, err := sink.OpenPool(t.Context(), pgtest.URL(), b.schema)
	require.NoError(t, err)
	b.searcher.store = newStore(t, pool, b.schema)
	// As serve does at start; stale answers are only reused once the
	// document map they are checked against is built.
	rebuildBloomFromTestDocs(t, b.fd)
	run(t, b.fd)

	warm := []string{"redis streams workers", "pgvector embeddings rows", "negative cache empty answers"}
	for _, q := range warm {
		res, err := b.search(t, Query{Text: q, K: 2})
		require.NoError(t, err)
		require.Equal(t, StatusOK, res.Status)
		require.NotEmpty(t, res.Hits)
	}
	// Fresh entries gone (as after their TTL), last good answers kept.
	_, err = BumpGeneration(t.Context(), b.rdb, b.prefix, "articles")
	require.NoError(t, err)
	pool.Close()

	replyTo := b.prefix + ":reply:down"
	cold := []string{"never asked before", "another cold question"}
	for i, q := range append(append([]string{}, warm...), cold...) {
		b.sendRaw(t, "id", fmt.Sprint("down-", i), "query", q, "k", "2", "reply_to", replyTo)
	}
	total := len(warm) + len(cold)
	b.readReplies(t, replyTo, total)
	b.quiesce(t)
	msgs, err := b.rdb.XRange(t.Context(), replyTo, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, total, "one reply per request, none twice")
	byID := map[string]Result{}
	for _, m := range msgs {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		byID[r.ID] = r
	}
	for i := range warm {
		r := byID[fmt.Sprint("down-", i)]
		require.Equal(t, StatusDegraded, r.Status, r.Reason)
		require.Equal(t, SourceStale, r.Source)
		require.NotEmpty(t, r.Hits)
		require.Contains(t, r.Reason, "vector search")
	}
	for i := range cold {
		r := byID[fmt.Sprint("down-", len(warm)+i)]
		require.Equal(t, StatusError, r.Status)
		require.Equal(t, SourceNone, r.Source)
		require.Contains(t, r.Reason, "full-text fallback failed")
	}
	// Each went through max_deliveries tries and then the DLQ.
	dl, err := b.fd.DLQList(t.Context(), 100)
	require.NoError(t, err)
	require.Len(t, dl, total)
	for _, d := range dl {
		require.Equal(t, b.cfg.MaxDeliveries, d.Attempts)
		require.Contains(t, d.Reason, "vector search")
		require.NotEmpty(t, d.RequestEntryID)
		require.False(t, d.FailedAt.IsZero())
	}
	require.EqualValues(t, total, testutilDeadLetters(b.fd))
}

// When the embedder is down but Postgres is up, a request with no stale
// answer is answered by full-text search over the chunk text.
func TestEmbedderDownFallsBackToFullText(t *testing.T) {
	b := setup(t, nil)
	b.emb.fail.Store(true)
	run(t, b.fd)
	res, err := b.search(t, Query{Text: "circuit breakers", K: 3})
	require.NoError(t, err)
	require.Equal(t, StatusDegraded, res.Status)
	require.Equal(t, SourceFullText, res.Source)
	require.Contains(t, res.Reason, "embed query")
	require.NotEmpty(t, res.Hits)
	require.Equal(t, "public.articles/4", res.Hits[0].DocID)
	require.Zero(t, b.searcher.searches.Load(), "no vector search without a vector")
}

// The breaker opens after consecutive failures, sends requests straight to
// the degraded path (no retries, no extra load), and closes by itself once
// the search works again.
func TestBreakerOpensAndCloses(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.BreakerFailures = 2
		c.BreakerCooldown = 200 * time.Millisecond
		c.MaxDeliveries = 1
	})
	b.searcher.fail.Store(true)
	run(t, b.fd)

	for i := range 2 {
		res, err := b.search(t, Query{Text: fmt.Sprint("failing question ", i), K: 1})
		require.NoError(t, err)
		require.Equal(t, StatusDegraded, res.Status, "answered from the DLQ by full-text")
	}
	require.Equal(t, breakerOpen, b.fd.breaker.State())
	require.EqualValues(t, 2, testutilGauge(b.fd))
	before := b.searcher.searches.Load()
	res, err := b.search(t, Query{Text: "while open", K: 1})
	require.NoError(t, err)
	require.Equal(t, StatusDegraded, res.Status)
	require.Contains(t, res.Reason, "circuit breaker open")
	require.Equal(t, before, b.searcher.searches.Load(), "no search while open")

	b.searcher.fail.Store(false)
	// After the cooldown a probe goes through and closes the breaker.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		res, err := b.client.Search(ctx, Query{Text: fmt.Sprint("recovered ", i), K: 1})
		require.NoError(t, err)
		if res.Status == StatusOK {
			requireSearched(t, res)
			break
		}
		require.Equal(t, StatusDegraded, res.Status)
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, breakerClosed, b.fd.breaker.State())
}

func TestDLQOperations(t *testing.T) {
	b := setup(t, func(c *Config) { c.MaxDeliveries = 1; c.BreakerFailures = 1000 })
	// The DLQ worker is not running: dead letters stay unanswered.
	ctx := t.Context()
	require.NoError(t, b.fd.ensureGroups(ctx))
	for i := range 3 {
		b.sendRaw(t, "id", fmt.Sprint("d", i), "query", "q", "k", "1", "reply_to", b.prefix+":reply:dlq")
		msgs, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.fd.cfg.Group, Consumer: "c", Streams: []string{b.fd.keys.requests(), ">"}, Count: 1, Block: -1}).Result()
		require.NoError(t, err)
		require.NoError(t, b.fd.deadLetter(ctx, msgs[0].Messages[0].ID, 1, "test failure"))
	}
	list, err := b.fd.DLQList(ctx, 2)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "d0", list[0].ID)
	require.Equal(t, "test failure", list[0].Reason)
	require.Equal(t, 1, list[0].Attempts)
	require.Equal(t, "q", list[0].Query)
	_, err = b.fd.DLQList(ctx, 0)
	require.Error(t, err)

	n, err := b.fd.DLQReplay(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	list, err = b.fd.DLQList(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, list)

	// Replayed requests are answered normally, exactly once each.
	run(t, b.fd)
	b.readReplies(t, b.prefix+":reply:dlq", 3)
	b.quiesce(t)
	msgs, err := b.rdb.XRange(ctx, b.prefix+":reply:dlq", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	for _, m := range msgs {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		require.Equal(t, StatusOK, r.Status)
	}

	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.fd.keys.dlq(), Values: []any{"id", "x"}}).Err())
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.fd.keys.dlq(), Values: []any{"id", "y"}}).Err())
	purged, err := b.fd.DLQPurge(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, purged)
	l, err := b.rdb.XLen(ctx, b.fd.keys.dlq()).Result()
	require.NoError(t, err)
	require.Zero(t, l)
}
