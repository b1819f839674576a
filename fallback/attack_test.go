package fallback

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// Tests of the front door under a hostile or careless client.
// Each fails on the code before the fix (checked by reverting it locally).

// keyState is what a request's reply could have damaged about a key.
type keyState struct {
	typ string
	ttl time.Duration
	len int64
}

func stateOf(t *testing.T, rdb *redis.Client, key string) keyState {
	t.Helper()
	ctx := t.Context()
	typ, err := rdb.Type(ctx, key).Result()
	require.NoError(t, err)
	ttl, err := rdb.PTTL(ctx, key).Result()
	require.NoError(t, err)
	st := keyState{typ: typ, ttl: ttl}
	if typ == "stream" {
		st.len, err = rdb.XLen(ctx, key).Result()
		require.NoError(t, err)
	}
	return st
}

// Finding 1: reply_to may name no key outside the reply namespace, and a
// reply key of the wrong type gets nothing written, marker included.
func TestReplyToIsConfinedToTheReplyNamespace(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)
	// Warm the cache so the hit path (serveScript) is attacked too.
	_, err := b.search(t, Query{Text: "redis streams workers", K: 2})
	require.NoError(t, err)

	k := b.fd.keys
	targets := []string{k.requests(), k.dlq(), k.generation(), k.cache("x"), k.stale("x"),
		k.embedding("x"), "elsewhere:" + b.prefix + ":stream", b.prefix + ":bloom:articles:doc"}
	before := map[string]keyState{}
	for _, key := range targets {
		before[key] = stateOf(t, b.rdb, key)
	}
	for i, key := range targets {
		for _, q := range []string{"redis streams workers", fmt.Sprint("never cached ", i)} {
			b.sendRaw(t, "id", fmt.Sprint("evil-", i, q), "query", q, "k", "2", "reply_to", key)
		}
	}
	// A reply key of the wrong type inside the namespace.
	wrong := b.prefix + ":reply:a-string"
	require.NoError(t, b.rdb.Set(t.Context(), wrong, "not a stream", 0).Err())
	b.sendRaw(t, "id", "wrong-hit", "query", "redis streams workers", "k", "2", "reply_to", wrong)
	b.sendRaw(t, "id", "wrong-miss", "query", "a question never asked", "k", "2", "reply_to", wrong)
	b.quiesce(t)
	t.Cleanup(func() { _ = b.rdb.Del(context.Background(), "elsewhere:"+b.prefix+":stream").Err() })

	for _, key := range targets {
		after := stateOf(t, b.rdb, key)
		if key == k.requests() {
			// Only its length moves (our own requests); never a TTL.
			require.Equal(t, before[key].typ, after.typ)
			require.Less(t, after.ttl, time.Duration(0), "the request stream got an expiry")
			continue
		}
		require.Equal(t, before[key], after, "reply written to %s", key)
	}
	typ, err := b.rdb.Type(t.Context(), wrong).Result()
	require.NoError(t, err)
	require.Equal(t, "string", typ)
	for _, id := range []string{"wrong-hit", "wrong-miss"} {
		n, err := b.rdb.Exists(t.Context(), k.replied(wrong, id)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s: answered marker set with no reply", id)
	}
	waitCounter(t, b.fd.metrics, outcomeInvalid, float64(2*len(targets)+2))
	// The front door still works.
	res, err := b.search(t, Query{Text: "circuit breakers", K: 1})
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
}

// Finding 2: input Postgres rejects as data is the request's fault: an
// error reply, and the breaker stays closed for everyone else.
func TestBadInputDoesNotOpenTheBreaker(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.BreakerFailures = 2
		c.BreakerCooldown = time.Hour
		c.AllowedFilters = []string{FilterDocID, FilterTable, "lang"}
	})
	run(t, b.fd)
	replyTo := b.prefix + ":reply:bad"
	bad := []string{`{"table":"\u0000"}`, `{"lang":"\u0000"}`, `{"lang":1e999999}`}
	n := 0
	for round := range 3 {
		for _, f := range bad {
			b.sendRaw(t, "id", fmt.Sprint("bad-", n), "query", fmt.Sprint("question ", round), "k", "2", "filter", f, "reply_to", replyTo)
			n++
		}
	}
	for _, m := range b.readReplies(t, replyTo, n) {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		require.Equal(t, StatusError, r.Status, r.Reason)
		require.Contains(t, r.Reason, "invalid request")
	}
	require.Equal(t, breakerClosed, b.fd.breaker.State())
	res, err := b.search(t, Query{Text: "pgvector embeddings", K: 2})
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	requireSearched(t, res)
}

// writeDoc stores a document as the pipeline would, through the same calls
// as the pipeline makes to its observer in serve.
func (b *bundle) writeDoc(t *testing.T, key, tenant string, version uint64, meta map[string]any) {
	t.Helper()
	ctx := t.Context()
	ch := b.fd.Changes()
	id := sink.DocID(testTable, key)
	doc := sink.Document{ID: id, Table: testTable, Key: key, Tenant: tenant,
		Version: cdc.Version{Kind: "pg", Parts: []uint64{version}}, SourceTS: time.Now(), Metadata: meta}
	for _, d := range testDocs {
		if d.key == key {
			for i, text := range d.texts {
				doc.Chunks = append(doc.Chunks, sink.Chunk{Position: i, Hash: fmt.Sprintf("%s-%d", key, i), Text: text, Tokens: len(strings.Fields(text)), Vector: embedText(text)})
			}
		}
	}
	if len(doc.Chunks) == 0 {
		text := "extra document " + key
		doc.Chunks = []sink.Chunk{{Position: 0, Hash: "x-" + key, Text: text, Tokens: 3, Vector: embedText(text)}}
	}
	require.NoError(t, ch.Upserting(ctx, tenant, id))
	out, err := b.store.Upsert(ctx, doc)
	require.NoError(t, err)
	require.True(t, out.Applied || out.Duplicate)
	require.NoError(t, ch.Upserted(ctx, tenant, id))
}

func (b *bundle) deleteDoc(t *testing.T, key string, version uint64) {
	t.Helper()
	_, err := b.store.Delete(t.Context(), testTable, key, cdc.Version{Kind: "pg", Parts: []uint64{version}}, time.Now())
	require.NoError(t, err)
	require.NoError(t, b.fd.Changes().Deleted(t.Context(), sink.DocID(testTable, key)))
}

func docIDs(hits []Hit) []string {
	var ids []string
	for _, h := range hits {
		ids = append(ids, h.DocID)
	}
	return ids
}

// Finding 3: a deleted document and one moved to another tenant leave the
// fresh cache at once, and stale (degraded) answers never cross tenants.
func TestDeletedAndMovedDocumentsLeaveAnswers(t *testing.T) {
	b := setupTenants(t, func(c *Config) { c.CacheTTL = time.Hour; c.BreakerFailures = 1; c.BreakerCooldown = time.Hour })
	rebuildBloomFromTestDocs(t, b.fd)
	run(t, b.fd)
	q := Query{Text: "redis streams workers pgvector embeddings rows", K: 4, Tenant: "acme"}
	res, err := b.search(t, q)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.articles/1", "public.articles/1", "public.articles/2", "public.articles/2"}, docIDs(res.Hits))
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, SourceCache, res.Source)
	globex := Query{Text: "bloom filters circuit breakers", K: 2, Tenant: "globex"}
	_, err = b.search(t, globex)
	require.NoError(t, err)

	b.deleteDoc(t, "1", 2)
	b.writeDoc(t, "2", "globex", 2, map[string]any{"lang": "en"})

	// The very next query: fresh cache abandoned by the generation bump.
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	requireSearched(t, res)
	require.Empty(t, res.Hits, "acme has no documents left: %v", docIDs(res.Hits))

	// Degraded answers reuse the stale store (kept from before the
	// changes): the moved and the deleted document are not in them, while
	// a stale answer whose documents are still there is still used.
	// (Fresh entries gone, as after their TTL.)
	_, err = BumpGeneration(t.Context(), b.rdb, b.prefix, "articles")
	require.NoError(t, err)
	b.searcher.fail.Store(true)
	res, err = b.search(t, q)
	require.NoError(t, err)
	require.Equal(t, StatusDegraded, res.Status)
	require.Empty(t, res.Hits, "deleted or moved document in a degraded answer (source %s)", res.Source)
	res, err = b.search(t, globex)
	require.NoError(t, err)
	require.Equal(t, StatusDegraded, res.Status)
	require.Equal(t, SourceStale, res.Source)
	require.NotEmpty(t, res.Hits)
	for _, h := range res.Hits {
		require.Contains(t, []string{"public.articles/3", "public.articles/4"}, h.DocID)
	}
}

// Finding 4: an id reused by another client, with another tenant, neither
// takes the victim's reply nor gets the victim's request dropped.
func TestReusedIDDoesNotStealTheReply(t *testing.T) {
	b := setupTenants(t, nil)
	victim, attacker := b.prefix+":reply:victim", b.prefix+":reply:attacker"
	// The attacker's request is first in the stream.
	b.sendRaw(t, "id", "shared", "query", "bloom filters tenants", "k", "2", "tenant", "globex", "reply_to", attacker)
	victimEntry, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: []any{
		"id", "shared", "query", "redis streams workers", "k", "2", "tenant", "acme", "reply_to", victim}}).Result()
	require.NoError(t, err)
	run(t, b.fd)
	b.readReplies(t, attacker, 1)
	msgs := b.readReplies(t, victim, 1)
	b.quiesce(t)
	var entries []string
	for _, m := range msgs {
		r, err := parseReply(m.Values)
		require.NoError(t, err)
		require.Equal(t, "shared", r.ID)
		require.NotEmpty(t, r.Hits)
		for _, h := range r.Hits {
			require.Contains(t, []string{"public.articles/1", "public.articles/2"}, h.DocID, "the victim got another tenant's answer")
		}
		entries = append(entries, fieldString(m.Values, fieldEntry))
	}
	require.Len(t, entries, 1)
	require.Equal(t, victimEntry, entries[0], "the victim's reply names its request entry")
}

// Finding 4, client side: a reply on the client's stream with its id but
// another request entry (a reused id, or a forgery) is not taken.
func TestClientSkipsAReplyToAnotherEntry(t *testing.T) {
	b := setupTenants(t, nil)
	c := NewClient(b.rdb, b.prefix)
	t.Cleanup(func() { _ = c.Close() })
	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.Search(ctx, Query{Text: "redis streams workers", K: 2, Tenant: "acme"})
		done <- out{res, err}
	}()
	// The front door is not running yet: answer the request's id first.
	var req redis.XMessage
	require.Eventually(t, func() bool {
		xs, err := b.rdb.XRange(t.Context(), b.fd.keys.requests(), "-", "+").Result()
		require.NoError(t, err)
		if len(xs) == 1 {
			req = xs[0]
		}
		return len(xs) == 1
	}, 10*time.Second, time.Millisecond)
	forged := reply{Status: StatusOK, Source: SourceCache,
		Results: []byte(`[{"doc_id":"public.articles/3","table":"t","key":"3","position":0,"text":"forged","score":1}]`)}
	require.NoError(t, b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: fieldString(req.Values, fieldReplyTo),
		Values: forged.fields(fieldString(req.Values, fieldID), "1-1")}).Err())
	run(t, b.fd)
	got := <-done
	require.NoError(t, got.err)
	require.NotEmpty(t, got.res.Hits)
	for _, h := range got.res.Hits {
		require.NotEqual(t, "forged", h.Text)
		require.Contains(t, []string{"public.articles/1", "public.articles/2"}, h.DocID)
	}
}

// Finding 5: a doc_id filter searches that document in SQL and returns at
// most k hits, even when the document is nowhere near the global top.
func TestDocIDFilterInSQL(t *testing.T) {
	b := setup(t, func(c *Config) { c.MaxK = 2 })
	run(t, b.fd)
	q := Query{Text: "redis streams deliver queries to workers", K: 1, Filter: map[string]any{FilterDocID: "public.articles/3"}}
	for range 2 { // search, then cache
		res, err := b.search(t, q)
		require.NoError(t, err)
		require.Equal(t, []string{"public.articles/3"}, docIDs(res.Hits))
	}
	res, err := b.search(t, Query{Text: "redis streams", K: 2, Filter: map[string]any{FilterDocID: "public.articles/1"}})
	require.NoError(t, err)
	require.Len(t, res.Hits, 2)
}

// Finding 6: filter numbers stay exact from decoding to SQL and in the
// cache key.
func TestBigFilterNumbersStayExact(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)
	b.writeDoc(t, "big", "", 1, map[string]any{"lang": 9007199254740992})
	for _, c := range []struct {
		filter string
		want   []string
	}{
		{`{"lang":9007199254740993}`, nil},
		{`{"lang":9007199254740992}`, []string{"public.articles/big"}},
		{`{"lang":9007199254740993}`, nil},
	} {
		replyTo := b.prefix + ":reply:" + randomID()
		b.sendRaw(t, "id", randomID(), "query", "extra document", "k", "3", "filter", c.filter, "reply_to", replyTo)
		msgs := b.readReplies(t, replyTo, 1)
		r, err := parseReply(msgs[0].Values)
		require.NoError(t, err)
		require.Equal(t, StatusOK, r.Status, r.Reason)
		require.Equal(t, c.want, docIDs(r.Hits), c.filter)
	}
}

// Finding 7: a huge filter is refused before it is parsed.
func TestHugeFilterRefusedBeforeParsing(t *testing.T) {
	cfg := Config{AllowedFilters: []string{"lang"}}.WithDefaults()
	huge := `{"lang":[` + strings.Repeat(`"xxxxxxxxxxxxxxxx",`, 1<<20) + `"x"]}` // ~20 MB
	values := map[string]any{"id": "h", "query": "q", "k": "1", "reply_to": cfg.ReplyPrefix + "h", "filter": huge}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := parseRequest("1-1", values, cfg, time.Now())
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "max_request_bytes")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to refuse a 20 MB filter")

	values["filter"] = `{"lang":"` + strings.Repeat("x", cfg.MaxFilterBytes) + `"}`
	_, err = parseRequest("1-1", values, cfg, time.Now())
	require.ErrorContains(t, err, "max_filter_bytes")
}

// Finding 8: a document written while a rebuild scans is in the new
// filters and map, whether its write began before or during the scan.
func TestBloomRebuildLosesNoConcurrentWrite(t *testing.T) {
	b := setupTenants(t, nil)
	ctx := t.Context()
	ch := b.fd.Changes()
	// Began before the rebuild (Bloom add done), committed during the scan.
	require.NoError(t, ch.Upserting(ctx, "early-tenant", "t/early"))
	n, err := b.fd.Bloom().Rebuild(ctx, func(add func(string, string) error) error {
		require.NoError(t, add("acme", "t/scanned"))
		require.NoError(t, ch.Upserted(ctx, "early-tenant", "t/early"))
		// Written entirely during the scan.
		require.NoError(t, ch.Upserting(ctx, "late-tenant", "t/late"))
		require.NoError(t, ch.Upserted(ctx, "late-tenant", "t/late"))
		// Deleted during the scan after the scan's snapshot saw it.
		require.NoError(t, ch.Deleted(ctx, "t/gone"))
		return add("acme", "t/gone")
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for kind, values := range map[string][]string{KindDoc: {"t/early", "t/late", "t/scanned"}, KindTenant: {"early-tenant", "late-tenant", "acme"}} {
		for _, v := range values {
			ok, err := b.fd.Bloom().MayContain(ctx, kind, v)
			require.NoError(t, err)
			require.True(t, ok, "%s %s lost by the rebuild", kind, v)
		}
	}
	m, err := b.rdb.HGetAll(ctx, b.fd.keys.docs()).Result()
	require.NoError(t, err)
	require.Equal(t, "early-tenant", m["t/early"])
	require.Equal(t, "late-tenant", m["t/late"])
	require.Equal(t, tombstone, m["t/gone"], "a delete during the scan is not undone by it")

	// A failed scan leaves the live filters as they were.
	_, err = b.fd.Bloom().Rebuild(ctx, func(add func(string, string) error) error {
		return fmt.Errorf("postgres went away")
	})
	require.ErrorContains(t, err, "postgres went away")
	ok, err := b.fd.Bloom().MayContain(ctx, KindDoc, "t/late")
	require.NoError(t, err)
	require.True(t, ok)
}

// ctxSearcher blocks each vector search until its context ends.
type ctxSearcher struct{ *countingSearcher }

func (s ctxSearcher) Search(ctx context.Context, _ []float32, _ sink.Query) ([]sink.Hit, error) {
	s.searches.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// Finding 10: reclaiming is bounded per tick and stops with the front door.
func TestReclaimRespectsContextCancellation(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.SearchTimeout = 5 * time.Second
		c.MaxDeliveries = 10
		c.BreakerFailures = 1000
	})
	fd, err := NewFrontDoor(b.cfg, b.rdb, b.emb, ctxSearcher{b.searcher}, nil, nil)
	require.NoError(t, err)
	require.NoError(t, fd.ensureGroups(t.Context()))
	replyTo := b.prefix + ":reply:reclaim"
	const n = 16
	for i := range n {
		b.sendRaw(t, "id", fmt.Sprint("r", i), "query", fmt.Sprint("slow question ", i), "k", "1", "reply_to", replyTo)
	}
	// A consumer that takes them all and dies.
	_, err = b.rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: fd.cfg.Group, Consumer: "dead", Streams: []string{fd.keys.requests(), ">"}, Count: n}).Result()
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fd.Run(ctx) }()
	// Wait until every reclaimed search is in flight at once (one per
	// entry handled one after another would be only one).
	require.Eventually(t, func() bool { return b.searcher.searches.Load() >= n }, 10*time.Second, 5*time.Millisecond,
		"reclaimed requests are searched concurrently")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return after cancellation: the reclaimer waits for its searches")
	}
	// Nothing was answered or dead-lettered because of the cancellation.
	l, err := b.rdb.XLen(t.Context(), replyTo).Result()
	require.NoError(t, err)
	require.Zero(t, l)
	pend, err := b.rdb.XPending(t.Context(), fd.keys.requests(), fd.cfg.Group).Result()
	require.NoError(t, err)
	require.EqualValues(t, n, pend.Count, "left pending for the next front door")
	require.Zero(t, testutilDeadLetters(fd))
}
