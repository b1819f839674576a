package fallback

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string
	}{
		{name: "defaults are valid", mutate: func(*Config) {}},
		{name: "negative workers", mutate: func(c *Config) { c.Workers = -1 }, wantErr: []string{"frontdoor.workers: must be > 0"}},
		{name: "negative max_in_flight", mutate: func(c *Config) { c.MaxInFlight = -1 }, wantErr: []string{"frontdoor.max_in_flight: must be > 0"}},
		{name: "stale shorter than fresh", mutate: func(c *Config) { c.StaleTTL = time.Second }, wantErr: []string{"frontdoor.stale_ttl"}},
		{name: "lock shorter than search", mutate: func(c *Config) { c.LockTTL = time.Millisecond }, wantErr: []string{"frontdoor.lock_ttl"}},
		{name: "idempotency shorter than redelivery", mutate: func(c *Config) { c.IdempotencyTTL = 20 * time.Second },
			wantErr: []string{"frontdoor.idempotency_ttl: must cover the redelivery window max_deliveries × (min_idle + search_timeout) = 21s"}},
		{name: "idempotency covering redelivery", mutate: func(c *Config) { c.IdempotencyTTL = 21 * time.Second }},
		{name: "bad jitter", mutate: func(c *Config) { c.CacheJitter = 2 }, wantErr: []string{"frontdoor.cache_jitter"}},
		{name: "bad filter key", mutate: func(c *Config) { c.AllowedFilters = []string{"ok", "no spaces"} }, wantErr: []string{"frontdoor.allowed_filters[1]"}},
		{name: "bloom too small", mutate: func(c *Config) { c.Bloom.Bits = 8 }, wantErr: []string{"frontdoor.bloom.bits"}},
		{name: "reply namespace holding every key", mutate: func(c *Config) { c.ReplyPrefix = "ragsync:" }, wantErr: []string{"frontdoor.reply_prefix", "overlaps"}},
		{name: "reply namespace inside the request stream", mutate: func(c *Config) { c.ReplyPrefix = "ragsync:requests:r:" }, wantErr: []string{"frontdoor.reply_prefix"}},
		{name: "reply namespace of its own", mutate: func(c *Config) { c.ReplyPrefix = "replies:" }},
		{name: "request bound below its parts", mutate: func(c *Config) { c.MaxRequestBytes = 5000 }, wantErr: []string{"frontdoor.max_request_bytes: must be >= max_query_bytes + max_filter_bytes (8192)"}},
		{name: "negative filter bound", mutate: func(c *Config) { c.MaxFilterBytes = -1 }, wantErr: []string{"frontdoor.max_filter_bytes: must be > 0"}},
		{name: "negative max_after_wait", mutate: func(c *Config) { c.MaxAfterWait = -time.Second }, wantErr: []string{"frontdoor.max_after_wait: must be a positive duration"}},
		{name: "negative max_after_waiters", mutate: func(c *Config) { c.MaxAfterWaiters = -1 }, wantErr: []string{"frontdoor.max_after_waiters: must be > 0"}},
		{name: "reply namespace inside the cached readings", mutate: func(c *Config) { c.ReplyPrefix = "ragsync:cachemarks:r:" }, wantErr: []string{"frontdoor.reply_prefix"}},
		{name: "every problem at once", mutate: func(c *Config) { c.MaxK = -1; c.MinIdle = -time.Second; c.Bloom.Hashes = 99 },
			wantErr: []string{"frontdoor.max_k", "frontdoor.min_idle", "frontdoor.bloom.hashes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{}.WithDefaults()
			tc.mutate(&c)
			err := c.Validate()
			if len(tc.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	require.Equal(t, "ragsync", c.Prefix)
	require.Equal(t, "frontdoor", c.Group)
	require.Equal(t, 3, c.MaxDeliveries)
	require.Equal(t, c.MinIdle/2, c.ReclaimInterval)
	require.Equal(t, []string{FilterDocID, FilterTable}, c.AllowedFilters)
	require.NotEmpty(t, c.Consumer)
}

func TestParseRequest(t *testing.T) {
	cfg := Config{MaxK: 10, MaxQueryBytes: 32, AllowedFilters: []string{"lang", FilterDocID}}.WithDefaults()
	now := time.UnixMilli(1_000_000)
	valid := func(extra ...any) map[string]any {
		m := map[string]any{"id": "r1", "query": "  hello \t world ", "k": "3", "reply_to": "ragsync:reply:rs"}
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == nil {
				delete(m, extra[i].(string))
				continue
			}
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		values  map[string]any
		wantErr string
		check   func(t *testing.T, r request)
	}{
		{name: "valid, query normalised", values: valid(), check: func(t *testing.T, r request) {
			require.Equal(t, "hello world", r.Query)
			require.Equal(t, 3, r.K)
		}},
		{name: "filter split into metadata and doc id", values: valid("filter", `{"lang":"en","doc_id":"t/1"}`), check: func(t *testing.T, r request) {
			require.Equal(t, map[string]any{"lang": "en"}, r.Filter)
			require.Equal(t, "t/1", r.DocID)
			require.Equal(t, `{"doc_id":"t/1","lang":"en"}`, r.FilterJSON)
		}},
		{name: "missing id", values: valid("id", nil), wantErr: "id: missing"},
		{name: "missing reply_to", values: valid("reply_to", nil), wantErr: "reply_to: missing"},
		{name: "empty query", values: valid("query", "   "), wantErr: "query: empty"},
		{name: "query too long", values: valid("query", strings.Repeat("x", 33)), wantErr: "33 bytes is over the limit of 32"},
		{name: "invalid utf8", values: valid("query", "\xff\xfe"), wantErr: "not valid UTF-8"},
		{name: "k not a number", values: valid("k", "ten"), wantErr: `k: "ten" is not an integer`},
		{name: "k zero", values: valid("k", "0"), wantErr: "0 is outside 1..10"},
		{name: "k over max", values: valid("k", "11"), wantErr: "11 is outside 1..10"},
		{name: "filter not json", values: valid("filter", "lang=en"), wantErr: "filter: not a JSON object"},
		{name: "filter key not allowed", values: valid("filter", `{"secret":1}`), wantErr: `key "secret" is not allowed`},
		{name: "doc_id not a string", values: valid("filter", `{"doc_id":5}`), wantErr: "doc_id must be a non-empty string"},
		{name: "deadline passed", values: valid("deadline_ms", "999000"), wantErr: "deadline passed 1s ago"},
		{name: "deadline garbage", values: valid("deadline_ms", "soon"), wantErr: "not a Unix time"},
		{name: "deadline ahead", values: valid("deadline_ms", "1000500")},
		{name: "after an LSN, default wait", values: valid("after", "16/B374D848"), check: func(t *testing.T, r request) {
			require.NotNil(t, r.After)
			require.Equal(t, "16/B374D848", r.After.Positions[0].Position)
			require.Equal(t, DefaultAfterWait, r.AfterWait)
		}},
		{name: "after a time, no wait", values: valid("after", "2026-12-07T10:04:05Z", "after_timeout_ms", "0"), check: func(t *testing.T, r request) {
			require.False(t, r.After.Time.IsZero())
			require.Zero(t, r.AfterWait)
		}},
		{name: "no after", values: valid(), check: func(t *testing.T, r request) { require.Nil(t, r.After) }},
		{name: "after garbage", values: valid("after", "yesterday"), wantErr: `after: "yesterday" is neither a position`},
		{name: "after_timeout_ms negative", values: valid("after", "1", "after_timeout_ms", "-5"), wantErr: "after_timeout_ms: \"-5\" is not a number of milliseconds"},
		// reply_to is confined to the reply namespace.
		{name: "reply_to the request stream", values: valid("reply_to", "ragsync:requests"), wantErr: `reply_to: must be a key under "ragsync:reply:"`},
		{name: "reply_to the generation key", values: valid("reply_to", "ragsync:generation:default"), wantErr: "reply_to: must be a key under"},
		{name: "reply_to the bare namespace", values: valid("reply_to", "ragsync:reply:"), wantErr: "reply_to: must be a key under"},
		{name: "reply_to too long", values: valid("reply_to", "ragsync:reply:"+strings.Repeat("r", 257)), wantErr: "reply_to: must be a key under"},
		// What Postgres rejects as data never gets that far.
		{name: "NUL in a filter value", values: valid("filter", `{"lang":"\u0000"}`), wantErr: "filter.lang: contains a NUL"},
		{name: "NUL deep in a filter", values: valid("filter", `{"lang":{"a":["x\u0000"]}}`), wantErr: "filter.lang: contains a NUL"},
		{name: "NUL in a filter key", values: valid("filter", `{"lang":{"\u0000":1}}`), wantErr: "filter.lang: contains a NUL"},
		{name: "NUL in doc_id", values: valid("filter", `{"doc_id":"t/\u0000"}`), wantErr: "filter.doc_id: contains a NUL"},
		{name: "NUL in tenant", values: valid("tenant", "ac\x00me"), wantErr: "tenant: contains a NUL"},
		{name: "tenant not utf8", values: valid("tenant", "\xff"), wantErr: "tenant: not valid UTF-8"},
		{name: "NUL in query", values: valid("query", "a\x00b"), wantErr: "query: contains a NUL"},
		// Sizes are bounded before parsing.
		{name: "filter too big", values: valid("filter", `{"lang":"`+strings.Repeat("x", 4096)+`"}`), wantErr: "over the limit of 4096 (max_filter_bytes)"},
		{name: "request too big", values: valid("junk", strings.Repeat("x", 20000)), wantErr: "request: 200"},
		{name: "trailing data after filter", values: valid("filter", `{"lang":"en"} {}`), wantErr: "data after the object"},
		// Numbers stay exact through the cache key.
		{name: "big filter numbers kept exact", values: valid("filter", `{"lang":9007199254740993}`), check: func(t *testing.T, r request) {
			require.Equal(t, `{"lang":9007199254740993}`, r.FilterJSON)
			require.Equal(t, json.Number("9007199254740993"), r.Filter["lang"])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseRequest("1-1", tc.values, cfg, now)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				var ir *InvalidRequestError
				require.ErrorAs(t, err, &ir)
				require.True(t, ir.Permanent())
				return
			}
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestCacheKeys(t *testing.T) {
	base := request{Query: "hello world", K: 3}
	k := requestKeys("idx", 0, base)
	require.Equal(t, k, requestKeys("idx", 0, base), "deterministic")
	other := base
	other.Tenant = "acme"
	require.NotEqual(t, k.fresh, requestKeys("idx", 0, other).fresh, "tenant is part of the key")
	other = base
	other.K = 4
	require.NotEqual(t, k.fresh, requestKeys("idx", 0, other).fresh, "k is part of the key")
	next := requestKeys("idx", 1, base)
	require.NotEqual(t, k.fresh, next.fresh, "a new generation abandons the fresh entry")
	require.Equal(t, k.base, next.base, "but keeps the stale one")
}

func TestJitterSpreadsExpiry(t *testing.T) {
	d := time.Minute
	seen := map[time.Duration]bool{}
	for range 100 {
		j := jitter(d, 0.1)
		require.GreaterOrEqual(t, j, d)
		require.LessOrEqual(t, j, d+6*time.Second)
		seen[j] = true
	}
	require.Greater(t, len(seen), 50, "TTLs must not coincide")
	require.Equal(t, d, jitter(d, 0))
}

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	var states []breakerState
	b := newBreaker(3, 10*time.Second, func(s breakerState) { states = append(states, s) })
	b.now = func() time.Time { return now }

	require.True(t, b.Allow())
	b.Failure()
	b.Failure()
	require.Equal(t, breakerClosed, b.State(), "below the threshold")
	b.Success()
	b.Failure()
	b.Failure()
	require.Equal(t, breakerClosed, b.State(), "success resets the count")
	b.Failure()
	require.Equal(t, breakerOpen, b.State())
	require.False(t, b.Allow(), "open rejects")

	now = now.Add(10 * time.Second)
	require.True(t, b.Allow(), "one probe after the cooldown")
	require.Equal(t, breakerHalfOpen, b.State())
	require.False(t, b.Allow(), "only one probe at a time")
	b.Failure()
	require.Equal(t, breakerOpen, b.State(), "failed probe re-opens")
	require.False(t, b.Allow())

	now = now.Add(10 * time.Second)
	require.True(t, b.Allow())
	b.Success()
	require.Equal(t, breakerClosed, b.State(), "successful probe closes")
	require.True(t, b.Allow())

	// A probe that ends without a verdict is given back.
	b.Failure()
	b.Failure()
	b.Failure()
	now = now.Add(10 * time.Second)
	require.True(t, b.Allow())
	require.False(t, b.Allow())
	b.Release()
	require.True(t, b.Allow(), "released probe can be taken again")
	require.Equal(t, breakerHalfOpen, b.State())
	require.Equal(t, []breakerState{breakerOpen, breakerHalfOpen, breakerOpen, breakerHalfOpen, breakerClosed, breakerOpen, breakerHalfOpen}, states)
}

func TestLessID(t *testing.T) {
	require.True(t, lessID("9-0", "10-0"))
	require.True(t, lessID("10-2", "10-10"))
	require.False(t, lessID("10-10", "10-10"))
	require.False(t, lessID("11-0", "10-99"))
}

func TestVectorCodec(t *testing.T) {
	v := []float32{0, 1.5, -2.25, 3e-8}
	got, ok := decodeVector(encodeVector(v))
	require.True(t, ok)
	require.Equal(t, v, got)
	_, ok = decodeVector([]byte{1, 2, 3})
	require.False(t, ok, "truncated bytes are not a vector")
}

func TestParseReply(t *testing.T) {
	r, err := parseReply(map[string]any{"id": "a", "status": "degraded", "results": `[{"doc_id":"t/1","score":0.5}]`, "cached": "true", "source": "stale", "reason": "why"})
	require.NoError(t, err)
	require.Equal(t, Result{ID: "a", Status: StatusDegraded, Hits: []Hit{{DocID: "t/1", Score: 0.5}}, Reason: "why", Cached: true, Source: "stale"}, r)
	_, err = parseReply(map[string]any{"id": "a", "status": "maybe"})
	require.ErrorContains(t, err, `unknown status "maybe"`)
	_, err = parseReply(map[string]any{"id": "a", "status": "ok", "results": "{"})
	require.Error(t, err)
}

func TestAfterWaitIsCapped(t *testing.T) {
	f := &FrontDoor{cfg: Config{MaxAfterWait: 10 * time.Second}.WithDefaults()}
	now := time.Now()
	for _, tc := range []struct {
		name     string
		asked    time.Duration
		deadline time.Time
		want     time.Duration
	}{
		{"as asked", 3 * time.Second, time.Time{}, 3 * time.Second},
		{"at most max_after_wait", time.Minute, time.Time{}, 10 * time.Second},
		{"never past the deadline", 5 * time.Second, now.Add(2 * time.Second), 2 * time.Second},
		{"deadline already passed", 5 * time.Second, now.Add(-time.Second), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, f.afterWait(request{AfterWait: tc.asked, Deadline: tc.deadline}, now))
		})
	}
}
