package fallback

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// tenantDocs is which documents each tenant of testDocs may see.
var tenantDocs = map[string][]string{
	"acme":   {"public.articles/1", "public.articles/2"},
	"globex": {"public.articles/3", "public.articles/4"},
}

// hostile builds one randomised hostile request: fields of random kinds and
// sizes, reply_to at every key family under the prefix (and outside it),
// ids reused from legitimate requests with another tenant.
type hostile struct {
	rnd     *rand.Rand
	prefix  string
	targets []string // reply_to values
	legit   map[string]bool
	// legitIDs are ids of legitimate requests seen in the request stream,
	// reused while those requests may still be in flight.
	mu       sync.Mutex
	legitIDs []string
}

// watch collects the ids of legitimate requests as they are queued, as an
// attacker reading the request stream would.
func (h *hostile) watch(ctx context.Context, rdb *redis.Client, stream string) {
	last := "0-0"
	for ctx.Err() == nil {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 100, Block: 50 * time.Millisecond}).Result()
		if err != nil {
			continue
		}
		for _, m := range res[0].Messages {
			last = m.ID
			if h.legit[fieldString(m.Values, fieldReplyTo)] {
				h.mu.Lock()
				h.legitIDs = append(h.legitIDs, fieldString(m.Values, fieldID))
				h.mu.Unlock()
			}
		}
	}
}

func (h *hostile) pick(options ...func() (string, bool)) (string, bool) {
	return options[h.rnd.IntN(len(options))]()
}

func str(s string) func() (string, bool) { return func() (string, bool) { return s, true } }
func absent() (string, bool)             { return "", false }

func (h *hostile) bytes(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(h.rnd.IntN(256))
	}
	return string(b)
}

// request returns the fields, and the tenant and reply stream it would be
// answered on when it is one whose answer can be checked (own stream,
// known tenant, id not reused), else "".
func (h *hostile) request(n int) (fields []any, tenant, checkOn string) {
	add := func(name string, v string, ok bool) {
		if ok {
			fields = append(fields, name, v)
		}
	}
	own := h.prefix + ":reply:hostile-" + strconv.Itoa(h.rnd.IntN(4))
	h.mu.Lock()
	reused := ""
	if n := len(h.legitIDs); n > 0 {
		// Mostly the newest: likely still unanswered.
		reused = h.legitIDs[n-1-h.rnd.IntN(min(n, 4))]
	}
	h.mu.Unlock()
	id, _ := h.pick(str(fmt.Sprint("h-", n)), str(fmt.Sprint("h-", n)), str(reused), str(reused), str(strings.Repeat("i", 200)), str(""),
		func() (string, bool) { return h.bytes(16), true })
	add(fieldID, id, id != "" || h.rnd.IntN(2) == 0)
	replyTo, okR := h.pick(str(own), str(own), str(own), func() (string, bool) { return h.targets[h.rnd.IntN(len(h.targets))], true }, absent)
	if id == reused && h.legit[replyTo] {
		// A legitimate client's own (reply_to, id) is out of scope: a writer
		// who can read the request stream can always race it (README).
		replyTo = own
	}
	add(fieldReplyTo, replyTo, okR)
	q, okQ := h.pick(str("redis streams workers"), str("pgvector embeddings"), str("bloom filters circuit breakers"),
		str("redis streams workers"), str("pgvector embeddings"), str("bloom filters circuit breakers"),
		str(""), str(strings.Repeat("long ", 2000)), str("bad \xff\xfe utf8"), str("nul\x00query"), str("12345"), absent,
		func() (string, bool) { return h.bytes(h.rnd.IntN(64)), true })
	add(fieldQuery, q, okQ)
	k, okK := h.pick(str("2"), str("2"), str("2"), str("2"), str("0"), str("-1"), str("51"), str("1e3"), str("abc"), str(strings.Repeat("9", 40)), absent)
	add(fieldK, k, okK)
	f, okF := h.pick(absent, absent, str(`{"lang":"en"}`), str(`{"table":"\u0000"}`), str(`{"lang":"\u0000"}`),
		str(`{"table":"\u0000"}`), str(`{"lang":"\u0000"}`), str(`{"lang":1e999999}`), str(`{"lang":1e999999}`),
		str(`{"lang":1e999999}`), str(`{"lang":9007199254740993}`), str(`{"doc_id":5}`), str(`{"secret":1}`),
		str(`{"doc_id":"public.articles/1"}`), str(`{"doc_id":"public.articles/3"}`), str(`[1,2]`), str(`{"lang":"en"} {}`), str("not json"),
		func() (string, bool) { return `{"lang":"` + strings.Repeat("x", 5000+h.rnd.IntN(5000)) + `"}`, true })
	add(fieldFilter, f, okF)
	tn, okT := h.pick(str("acme"), str("globex"), str("acme"), str("globex"), str("nobody"), str("ac\x00me"), str("\xff"),
		str(strings.Repeat("t", 300)), absent)
	add(fieldTenant, tn, okT)
	d, okD := h.pick(absent, absent, str("1"), str("soon"), str(strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)))
	add(fieldDeadline, d, okD)
	if h.rnd.IntN(4) == 0 {
		add("junk", h.bytes(h.rnd.IntN(40000)), true)
	}
	// Checkable: our own stream, a fresh id, a real tenant (its answer, if
	// ok, must hold that tenant's documents only).
	if okR && replyTo == own && strings.HasPrefix(id, "h-") && okT && tenantDocs[tn] != nil {
		return fields, tn, own
	}
	return fields, "", ""
}

// TestAdversarialRequests sends randomised hostile requests while
// legitimate clients query. Afterwards every legitimate request
// got exactly one correct reply, no key outside the reply namespace was
// written by a reply, and no tenant saw another's document.
func TestAdversarialRequests(t *testing.T) {
	b := setupTenants(t, func(c *Config) {
		c.BreakerFailures = 3
		c.BreakerCooldown = time.Hour // a breaker opened by hostile input would stay open
	})
	rebuildBloomFromTestDocs(t, b.fd)
	run(t, b.fd)
	ctx := t.Context()
	k := b.fd.keys
	outside := "elsewhere:" + b.prefix + ":stream"
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: outside, Values: []any{"x", "1"}}).Err())
	t.Cleanup(func() { _ = b.rdb.Del(context.Background(), outside).Err() })
	wrongType := b.prefix + ":reply:a-hash"
	require.NoError(t, b.rdb.HSet(ctx, wrongType, "f", "v").Err())

	legit := map[string]*Client{}
	for _, tenant := range []string{"acme", "globex"} {
		c := NewClient(b.rdb, b.prefix)
		c.Poll = 100 * time.Millisecond
		t.Cleanup(func() { _ = c.Close() })
		legit[tenant] = c
	}
	legitStreams := func() []string {
		var s []string
		for _, c := range legit {
			c.mu.Lock()
			s = append(s, c.replyStream())
			c.mu.Unlock()
		}
		return s
	}()
	h := &hostile{rnd: rand.New(rand.NewPCG(11, 2026)), prefix: b.prefix, legit: map[string]bool{}, targets: append([]string{
		k.requests(), k.dlq(), k.generation(), k.cache("x"), k.stale("x"), k.lock("x"), k.embedding("x"),
		k.replied("x", "y"), k.failure("0-1"), b.prefix + ":bloom:articles:doc", b.prefix + ":bloom:articles:tenant",
		k.docs(), b.prefix + ":reply:", b.prefix + ":reply", wrongType, outside, "",
	}, legitStreams...)}
	for _, s := range legitStreams {
		h.legit[s] = true
	}

	type answer struct {
		tenant string
		res    Result
	}
	var (
		mu      sync.Mutex
		answers []answer
		checks  = map[string]string{} // "reply_to\x00id" → tenant
	)
	const legitPerTenant, hostileCount = 30, 300
	deadline := time.Now().Add(45 * time.Second) // bound on the whole attack
	g, gctx := errgroup.WithContext(ctx)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { h.watch(watchCtx, b.rdb, k.requests()) })
	queries := []string{"redis streams workers", "pgvector embeddings rows", "bloom filters tenants", "circuit breakers database"}
	for tenant, c := range legit {
		for w := range 3 {
			g.Go(func() error {
				for i := range legitPerTenant / 3 {
					sctx, cancel := context.WithTimeout(gctx, 30*time.Second)
					// Unique texts: misses, which reach Postgres and would be
					// degraded if hostile input had opened the breaker.
					text := fmt.Sprintf("%s %s %d %d", queries[(i+w)%len(queries)], tenant, w, i)
					res, err := c.Search(sctx, Query{Text: text, K: 2, Tenant: tenant})
					cancel()
					if err != nil {
						return fmt.Errorf("legitimate %s request: %w", tenant, err)
					}
					mu.Lock()
					answers = append(answers, answer{tenant, res})
					mu.Unlock()
				}
				return nil
			})
		}
	}
	g.Go(func() error {
		for n := range hostileCount {
			if time.Now().After(deadline) {
				return fmt.Errorf("attack still running after its time bound (%d sent)", n)
			}
			fields, tenant, on := h.request(n)
			if len(fields) == 0 {
				fields = []any{"nothing", "at all"}
			}
			if err := b.rdb.XAdd(gctx, &redis.XAddArgs{Stream: k.requests(), Values: fields}).Err(); err != nil {
				return err
			}
			if on != "" {
				mu.Lock()
				checks[on+"\x00"+fieldsID(fields)] = tenant
				mu.Unlock()
			}
		}
		return nil
	})
	require.NoError(t, g.Wait())
	stopWatch()
	watching.Wait()
	b.quiesce(t)

	// Every legitimate request: one correct reply.
	require.Len(t, answers, 2*legitPerTenant)
	for _, a := range answers {
		require.Equal(t, StatusOK, a.res.Status, a.res.Reason)
		// A miss, or its own search's result when a slow first delivery
		// was reclaimed (min_idle is 100ms here); never degraded.
		require.Contains(t, []string{SourceSearch, SourceCache, SourceShared}, a.res.Source)
		require.NotEmpty(t, a.res.Hits)
		for _, hit := range a.res.Hits {
			require.Contains(t, tenantDocs[a.tenant], hit.DocID, "tenant %s saw another's document", a.tenant)
		}
	}
	for tenant, c := range legit {
		msgs, err := b.rdb.XRange(ctx, c.replyTo, "-", "+").Result()
		require.NoError(t, err)
		count := map[string]int{}
		for _, m := range msgs {
			count[fieldString(m.Values, fieldID)]++
		}
		for _, a := range answers {
			if a.tenant == tenant {
				require.Equal(t, 1, count[a.res.ID], "replies to legitimate request %s", a.res.ID)
			}
		}
	}

	// Hostile requests whose answer can be checked never crossed tenants.
	checked := 0
	for key, tenant := range checks {
		stream, id, _ := strings.Cut(key, "\x00")
		msgs, err := b.rdb.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		for _, m := range msgs {
			if fieldString(m.Values, fieldID) != id {
				continue
			}
			r, err := parseReply(m.Values)
			require.NoError(t, err)
			for _, hit := range r.Hits {
				require.Contains(t, tenantDocs[tenant], hit.DocID, "hostile %s request for %s saw another tenant's document", id, tenant)
			}
			checked++
		}
	}
	require.Positive(t, checked)

	// No reply outside the reply namespace: no key outside it holds a
	// reply entry or got an expiry, and the wrong-typed reply key is as it
	// was.
	var keysSeen []string
	iter := b.rdb.Scan(ctx, 0, b.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keysSeen = append(keysSeen, iter.Val())
	}
	require.NoError(t, iter.Err())
	keysSeen = append(keysSeen, outside)
	for _, key := range keysSeen {
		if strings.HasPrefix(key, b.fd.cfg.ReplyPrefix) && key != wrongType {
			continue
		}
		typ, err := b.rdb.Type(ctx, key).Result()
		require.NoError(t, err)
		switch key {
		case k.generation():
			require.Equal(t, "string", typ)
		case k.requests(), k.dlq(), outside:
			ttl, err := b.rdb.PTTL(ctx, key).Result()
			require.NoError(t, err)
			require.Less(t, ttl, time.Duration(0), "%s got an expiry from a reply", key)
		case wrongType:
			require.Equal(t, "hash", typ)
		}
		if typ != "stream" {
			continue
		}
		msgs, err := b.rdb.XRange(ctx, key, "-", "+").Result()
		require.NoError(t, err)
		for _, m := range msgs {
			_, hasStatus := m.Values[fieldStatus]
			_, hasResults := m.Values[fieldResults]
			require.False(t, hasStatus && hasResults, "a reply was written to %s", key)
		}
	}
	require.Equal(t, breakerClosed, b.fd.breaker.State(), "hostile input opened the breaker")
	t.Logf("legitimate %d, hostile %d (%d checked), invalid %v", len(answers), hostileCount, checked, counter(t, b.fd.metrics, outcomeInvalid))
}

func fieldsID(fields []any) string {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == fieldID {
			return fields[i+1].(string)
		}
	}
	return ""
}
