package fallback

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func TestHitAndMiss(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)

	first, err := b.search(t, Query{Text: "redis streams workers", K: 2})
	require.NoError(t, err)
	require.Equal(t, StatusOK, first.Status)
	require.Equal(t, SourceSearch, first.Source)
	require.False(t, first.Cached)
	require.Len(t, first.Hits, 2)
	// The front door answers what the index answers, in its order. (Not a
	// fixed ranking: HNSW is approximate, and on these few sparse vectors
	// a graph built with other random levels can rank another chunk first;
	// a search of one built graph is repeatable.)
	direct, err := b.store.Search(t.Context(), embedText("redis streams workers"), sink.Query{K: 2})
	require.NoError(t, err)
	require.Len(t, direct, 2)
	for i, h := range direct {
		require.Equal(t, h.DocID, first.Hits[i].DocID, "hit %d", i)
		require.Equal(t, h.Position, first.Hits[i].Position, "hit %d", i)
	}

	// Same question, different spacing: normalised to the same cache key.
	second, err := b.search(t, Query{Text: "  redis   streams workers ", K: 2})
	require.NoError(t, err)
	require.Equal(t, SourceCache, second.Source)
	require.True(t, second.Cached)
	require.Equal(t, first.Hits, second.Hits)

	require.EqualValues(t, 1, b.searcher.searches.Load(), "the hit never reached Postgres")
	require.EqualValues(t, 1, b.emb.calls.Load())
	require.EqualValues(t, 1, counter(t, b.fd.metrics, outcomeMiss))
	waitCounter(t, b.fd.metrics, outcomeHit, 1)

	// Another k is another question.
	third, err := b.search(t, Query{Text: "redis streams workers", K: 1})
	require.NoError(t, err)
	require.Equal(t, SourceSearch, third.Source)
	require.Len(t, third.Hits, 1)
	require.EqualValues(t, 1, b.emb.calls.Load(), "the query embedding came from its cache")

	// A new generation (after a reindex) abandons the fresh cache.
	_, err = BumpGeneration(t.Context(), b.rdb, b.prefix, "articles")
	require.NoError(t, err)
	fourth, err := b.search(t, Query{Text: "redis streams workers", K: 2})
	require.NoError(t, err)
	require.Equal(t, SourceSearch, fourth.Source)
	require.EqualValues(t, 3, b.searcher.searches.Load())
}

func TestFiltersReachTheSearch(t *testing.T) {
	b := setupTenants(t, nil)
	run(t, b.fd)
	res, err := b.search(t, Query{Text: "bloom filters tenants", K: 5, Tenant: "acme"})
	require.NoError(t, err)
	for _, h := range res.Hits {
		require.Contains(t, []string{"public.articles/1", "public.articles/2"}, h.DocID, "acme owns docs 1 and 2")
	}
	res, err = b.search(t, Query{Text: "bloom filters tenants", K: 5, Tenant: "globex", Filter: map[string]any{FilterDocID: "public.articles/3"}})
	require.NoError(t, err)
	require.NotEmpty(t, res.Hits)
	for _, h := range res.Hits {
		require.Equal(t, "public.articles/3", h.DocID)
	}
}

func TestNegativeCache(t *testing.T) {
	b := setupTenants(t, func(c *Config) { c.NegativeTTL = time.Minute; c.CacheTTL = time.Hour })
	run(t, b.fd)

	// No Bloom filter built yet, so the unknown tenant reaches Postgres once.
	q := Query{Text: "anything at all", K: 3, Tenant: "nobody"}
	res, err := b.search(t, q)
	require.NoError(t, err)
	require.Empty(t, res.Hits)
	requireSearched(t, res)

	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Empty(t, res.Hits)
	require.Equal(t, SourceCache, res.Source)
	require.EqualValues(t, 1, b.searcher.searches.Load())
	waitCounter(t, b.fd.metrics, outcomeNegativeHit, 1)

	// The empty answer is cached with the short TTL, not the long one.
	r, err := parseRequest("0-1", map[string]any{"id": "x", "reply_to": b.prefix + ":reply:r", "query": q.Text, "k": "3", "tenant": q.Tenant}, b.fd.cfg, time.Now())
	require.NoError(t, err)
	ttl, err := b.rdb.PTTL(t.Context(), b.fd.keys.cache(requestKeys("articles", 0, r).fresh)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, time.Minute+6*time.Second)
	n, err := b.rdb.Exists(t.Context(), b.fd.keys.stale(requestKeys("articles", 0, r).base)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "an empty answer is never kept as the last good one")
}

func rebuildBloomFromTestDocs(t testing.TB, fd *FrontDoor) {
	t.Helper()
	n, err := fd.Bloom().Rebuild(t.Context(), func(add func(string, string) error) error {
		for _, d := range testDocs {
			if err := add(d.tenant, sink.DocID(testTable, d.key)); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, len(testDocs), n)
}

// The issue's "10,000 unique queries for non-existent tenants cause no
// Postgres query": the counter wraps the real sink.Store.
func TestUnknownTenantsNeverReachPostgres(t *testing.T) {
	// min_idle well above the time a batch waits in a busy worker: this test
	// is about the Bloom filter, not about reclaiming slow entries.
	b := setupTenants(t, func(c *Config) {
		c.Workers = 4
		c.BatchSize = 64
		c.ReplyMaxLen = 20000
		c.MinIdle = 5 * time.Second
		c.ReclaimInterval = time.Second
	})
	rebuildBloomFromTestDocs(t, b.fd)
	run(t, b.fd)

	const n = 10000
	replyTo := b.prefix + ":reply:bulk"
	ctx := t.Context()
	for start := 0; start < n; start += 1000 {
		pipe := b.rdb.Pipeline()
		for i := start; i < start+1000; i++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: []any{
				"id", fmt.Sprintf("q%d", i), "query", fmt.Sprintf("question number %d", i), "k", "5",
				"tenant", fmt.Sprintf("ghost-%d", i), "reply_to", replyTo,
			}})
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
	}
	replies := b.readReplies(t, replyTo, n)
	b.quiesce(t)
	replies, err := b.rdb.XRange(ctx, replyTo, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, replies, n, "exactly one reply each")
	ids := map[string]bool{}
	for _, m := range replies {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		require.Equal(t, StatusOK, r.Status)
		require.Empty(t, r.Hits)
		require.Equal(t, SourceBloom, r.Source)
		ids[r.ID] = true
	}
	require.Len(t, ids, n)
	require.Zero(t, b.searcher.searches.Load(), "no vector search")
	require.Zero(t, b.searcher.textSearch.Load(), "no full-text search")
	require.Zero(t, b.emb.calls.Load(), "no embedding")
	require.EqualValues(t, n, counter(t, b.fd.metrics, outcomeBloomReject))

	// Unknown document ids are rejected the same way; known ones pass.
	res, err := b.search(t, Query{Text: "q", K: 1, Filter: map[string]any{FilterDocID: "public.articles/999"}})
	require.NoError(t, err)
	require.Equal(t, SourceBloom, res.Source)
	res, err = b.search(t, Query{Text: "redis", K: 1, Tenant: "acme"})
	require.NoError(t, err)
	requireSearched(t, res)
	require.EqualValues(t, 1, b.searcher.searches.Load())
}

// The issue's "1,000 identical concurrent misses cause exactly one embedding
// call and one pgvector query", across two front door processes sharing the
// consumer group (so both the singleflight and the Redis lock are in play).
func TestIdenticalMissesCoalesce(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.Workers = 8
		c.BatchSize = 4
		c.ReplyMaxLen = 5000
		c.MinIdle = 5 * time.Second
		c.ReclaimInterval = time.Second
	})
	// A slow search keeps the miss open while the others arrive.
	b.searcher.delay = 200 * time.Millisecond
	cfg2 := b.cfg
	cfg2.Consumer = "second-process"
	fd2 := b.newFrontDoor(t, cfg2, prometheus.NewRegistry())

	const n = 1000
	replyTo := b.prefix + ":reply:burst"
	ctx := t.Context()
	pipe := b.rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: []any{
			"id", fmt.Sprintf("same-%d", i), "query", "how do consumer groups share work", "k", "3", "reply_to", replyTo,
		}})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	// Start both only once the burst is queued, so every request is a
	// concurrent miss rather than a later cache hit.
	run(t, b.fd)
	run(t, fd2)

	b.readReplies(t, replyTo, n)
	b.quiesce(t)
	replies, err := b.rdb.XRange(ctx, replyTo, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, replies, n)
	var want []Hit
	for i, m := range replies {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		require.Equal(t, StatusOK, r.Status)
		if i == 0 {
			want = r.Hits
		}
		require.Equal(t, want, r.Hits)
	}
	require.NotEmpty(t, want)
	require.EqualValues(t, 1, b.emb.calls.Load(), "one embedding call")
	require.EqualValues(t, 1, b.searcher.searches.Load(), "one pgvector query")
}

func TestInvalidRequestsGetClearErrors(t *testing.T) {
	b := setup(t, func(c *Config) { c.MaxK = 10; c.MaxQueryBytes = 64 })
	run(t, b.fd)
	past := fmt.Sprint(time.Now().Add(-time.Minute).UnixMilli())
	tests := []struct {
		name   string
		fields []any
		reason string
	}{
		{"k zero", []any{"query", "q", "k", "0"}, "k: 0 is outside 1..10"},
		{"k too big", []any{"query", "q", "k", "11"}, "k: 11 is outside 1..10"},
		{"empty query", []any{"query", " ", "k", "1"}, "query: empty"},
		{"query too long", []any{"query", strings.Repeat("a", 65), "k", "1"}, "65 bytes is over the limit of 64"},
		{"filter key not allowed", []any{"query", "q", "k", "1", "filter", `{"owner":"me"}`}, `key "owner" is not allowed`},
		{"filter not json", []any{"query", "q", "k", "1", "filter", "{"}, "filter: not a JSON object"},
		{"deadline passed", []any{"query", "q", "k", "1", "deadline_ms", past}, "deadline_ms: deadline passed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			replyTo := b.prefix + ":reply:" + strings.ReplaceAll(tc.name, " ", "-")
			b.sendRaw(t, append([]any{"id", tc.name, "reply_to", replyTo}, tc.fields...)...)
			msgs := b.readReplies(t, replyTo, 1)
			r, err := parseReply(msgs[0].Values)
			require.NoError(t, err)
			require.Equal(t, StatusError, r.Status)
			require.Equal(t, tc.name, r.ID)
			require.Contains(t, r.Reason, tc.reason)
		})
	}
	// Without reply_to there is nowhere to answer: acknowledged, not retried.
	b.sendRaw(t, "id", "lost", "query", "q", "k", "1")
	b.quiesce(t)
	require.Zero(t, b.searcher.searches.Load())

	// The client surfaces an error reply as *ReplyError.
	_, err := b.search(t, Query{Text: "q", K: 99})
	var re *ReplyError
	require.ErrorAs(t, err, &re)
	require.Contains(t, re.Reason, "99 is outside 1..10")
}

// The issue's "a worker killed mid-request leaves no request unanswered and
// none answered twice": worker A searches, then dies before replying; B
// reclaims the entry after min_idle and answers — once.
func TestWorkerKilledMidRequest(t *testing.T) {
	// A never reclaims (it would answer its own pending request from the
	// cache on a loaded machine, before it is stopped): the test is about
	// B taking A's request over.
	b := setup(t, func(c *Config) { c.Workers = 1; c.Consumer = "a"; c.ReclaimInterval = time.Hour })
	var stopA context.CancelFunc
	var died sync.Once
	diedCh := make(chan struct{})
	b.fd.afterSearch = func(request) bool {
		died.Do(func() { close(diedCh) })
		return true // die here, every time: A never replies
	}
	stopA = run(t, b.fd)

	replyTo := b.prefix + ":reply:killed"
	b.sendRaw(t, "id", "kill-1", "query", "cosine search fast", "k", "2", "reply_to", replyTo)
	<-diedCh
	stopA()

	cfgB := b.cfg
	cfgB.Consumer = "b"
	cfgB.ReclaimInterval = 25 * time.Millisecond
	fdB := b.newFrontDoor(t, cfgB, prometheus.NewRegistry())
	run(t, fdB)
	msgs := b.readReplies(t, replyTo, 1)
	b.quiesce(t)
	msgs, err := b.rdb.XRange(t.Context(), replyTo, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1, "answered exactly once")
	r, err := parseReply(msgs[0].Values)
	require.NoError(t, err)
	require.Equal(t, StatusOK, r.Status)
	require.Equal(t, "kill-1", r.ID)
	require.NotEmpty(t, r.Hits)
	require.Equal(t, SourceCache, r.Source, "A's search result was cached before it died")
	require.EqualValues(t, 1, b.searcher.searches.Load())
	require.EqualValues(t, 1, testutilReclaimed(fdB))
}

func TestDuplicateRequestIDGetsOneReply(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)
	replyTo := b.prefix + ":reply:dup"
	for range 3 {
		b.sendRaw(t, "id", "dup-1", "query", "circuit breakers", "k", "1", "reply_to", replyTo)
	}
	b.readReplies(t, replyTo, 1)
	b.quiesce(t)
	n, err := b.rdb.XLen(t.Context(), replyTo).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	waitCounter(t, b.fd.metrics, outcomeDuplicate, 2)

	// The reply script itself is idempotent: a second send is dropped.
	r := request{EntryID: "0-1", ID: "direct", ReplyTo: b.prefix + ":reply:direct"}
	first, err := b.fd.send(t.Context(), b.fd.keys.requests(), r, reply{Status: StatusOK, Source: SourceSearch})
	require.NoError(t, err)
	require.Equal(t, sentFirst, first)
	first, err = b.fd.send(t.Context(), b.fd.keys.requests(), r, reply{Status: StatusOK, Source: SourceSearch})
	require.NoError(t, err)
	require.Equal(t, sentDuplicate, first)
	n, err = b.rdb.XLen(t.Context(), r.ReplyTo).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	ttl, err := b.rdb.PTTL(t.Context(), r.ReplyTo).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "reply streams expire")
}

func TestClientGivesUpWithoutFrontDoor(t *testing.T) {
	b := setup(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := b.client.Search(ctx, Query{Text: "anyone there", K: 1})
	require.ErrorIs(t, err, ErrNoReply)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The request carried the deadline, so a late front door refuses it.
	msgs, err := b.rdb.XRange(t.Context(), b.fd.keys.requests(), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.NotEmpty(t, msgs[0].Values[fieldDeadline])
}

func TestClientSharesOneReplyStreamAndCloses(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			res, err := b.search(t, Query{Text: fmt.Sprint("question ", i%4, " redis"), K: 1})
			if err == nil && res.Status != StatusOK {
				err = fmt.Errorf("status %s", res.Status)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n, err := b.rdb.Exists(t.Context(), b.client.replyTo).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "all replies went to the client's one stream")
	require.NoError(t, b.client.Close())
	n, err = b.rdb.Exists(t.Context(), b.client.replyTo).Result()
	require.NoError(t, err)
	require.Zero(t, n, "Close deletes the reply stream")
	_, err = b.search(t, Query{Text: "after close", K: 1})
	require.ErrorIs(t, err, errClientClosed)
	require.NoError(t, b.client.Close(), "Close twice is fine")
}

func TestRunWithoutDependencies(t *testing.T) {
	rdb, prefix := redisForTest(t)
	fd, err := NewFrontDoor(Config{Prefix: prefix}, rdb, nil, nil, nil, nil)
	require.NoError(t, err)
	require.ErrorIs(t, fd.Run(t.Context()), ErrNotRunnable)
	_, err = NewFrontDoor(Config{Prefix: prefix, Workers: -1}, rdb, nil, nil, nil, nil)
	require.ErrorContains(t, err, "frontdoor.workers")
	_, err = NewFrontDoor(Config{Prefix: prefix}, nil, nil, nil, nil, nil)
	require.Error(t, err)
}

func TestStreamsAreTrimmed(t *testing.T) {
	b := setup(t, func(c *Config) { c.BatchSize = 100; c.ReplyMaxLen = 100 })
	run(t, b.fd)
	replyTo := b.prefix + ":reply:trim"
	const n = 600
	pipe := b.rdb.Pipeline()
	for i := range n {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: []any{"id", fmt.Sprint("t", i), "query", "q", "k", "0", "reply_to", replyTo}})
	}
	_, err := pipe.Exec(t.Context())
	require.NoError(t, err)
	b.readReplies(t, replyTo, 1)
	b.quiesce(t)
	// Trimming is approximate (whole radix-tree nodes) and runs each
	// reclaim interval: wait until it removed most answered entries.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		l, err := b.rdb.XLen(ctx, b.fd.keys.requests()).Result()
		require.NoError(t, err)
		if l < n/2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("request stream still holds %d entries", l)
		case <-time.After(20 * time.Millisecond):
		}
	}
	l, err := b.rdb.XLen(t.Context(), replyTo).Result()
	require.NoError(t, err)
	require.Less(t, l, int64(n/2), "reply stream capped with MAXLEN ~")
}
