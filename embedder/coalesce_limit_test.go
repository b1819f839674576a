package embedder_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

func TestInFlightLimit(t *testing.T) {
	t.Parallel()
	base := embedder.CoalesceConfig{Linger: 20 * time.Millisecond, MaxInFlight: 32}
	with := func(f func(*embedder.CoalesceConfig)) embedder.CoalesceConfig {
		c := base
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name    string
		cfg     embedder.CoalesceConfig
		latency time.Duration
		tokens  float64
		want    int
	}{
		{"no answer yet: the floor", base, 0, 0, 4},
		{"a fast provider: the floor", base, 30 * time.Millisecond, 1000, 4},
		{"150 ms: a request every linger", base, 150 * time.Millisecond, 1000, 8},
		{"a slow provider: up to the ceiling", base, 2 * time.Second, 1000, 32},
		{"the ceiling below the floor", with(func(c *embedder.CoalesceConfig) { c.MaxInFlight = 2 }), 0, 0, 2},
		{"a floor of its own", with(func(c *embedder.CoalesceConfig) { c.MinInFlight = 6 }), 30 * time.Millisecond, 1000, 6},
		// 10 requests/s × 0.15 s = 1.5 requests at the provider, one more
		// waiting at the limiter.
		{"requests per minute", with(func(c *embedder.CoalesceConfig) { c.RequestsPerMinute = 600 }), 150 * time.Millisecond, 1000, 3},
		// 100,000 tokens/s ÷ 10,000 a request = 10 requests/s, as above.
		{"tokens per minute", with(func(c *embedder.CoalesceConfig) { c.TokensPerMinute = 6_000_000 }), 150 * time.Millisecond, 10_000, 3},
		{"rate limits that serve more than latency needs", with(func(c *embedder.CoalesceConfig) { c.RequestsPerMinute = 60_000 }), 150 * time.Millisecond, 1000, 8},
	} {
		require.Equal(t, tc.want, embedder.InFlightLimit(tc.cfg, tc.latency, tc.tokens), tc.name)
	}
}

// concurrency makes the fake API answer each request after delay and
// records the most requests it held at once.
func concurrency(b *testBundle, delay time.Duration) *atomic.Int64 {
	var now, peak atomic.Int64
	b.srv.SetHook(func(openaitest.Request) *openaitest.Fault {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(delay)
		now.Add(-1)
		return nil
	})
	return &peak
}

// A slow provider gets more requests in flight, as many as its latency ÷
// linger, so that a backlog drains at about one full request per linger
// instead of MinInFlight requests per latency.
func TestCoalescerConcurrencyFollowsLatency(t *testing.T) {
	t.Parallel()
	const delay, linger = 200 * time.Millisecond, 10 * time.Millisecond
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 32, MaxBatchInputs: 8, Linger: linger}, nil)
	peak := concurrency(b, delay)
	var docs [][]string
	for d := range 120 {
		docs = append(docs, docTexts(d, 8))
	}
	for _, r := range callAll(t.Context(), co, docs) {
		require.NoError(t, r.err)
		requireOwnVectors(t, docs[r.doc], r.vecs)
	}
	st := co.Stats()
	t.Logf("peak requests at the provider %d, limit %d, latency %s, %d requests", peak.Load(), st.Limit, st.Latency, st.Requests)
	require.GreaterOrEqual(t, st.Latency, delay, "the latency observed is the provider's")
	require.GreaterOrEqual(t, st.Limit, int(delay/linger), "latency ÷ linger requests allowed")
	require.LessOrEqual(t, st.Limit, 32)
	require.Greater(t, peak.Load(), int64(8), "more than the floor's requests were in flight")
	require.LessOrEqual(t, peak.Load(), int64(32), "never more than MaxInFlight")
	require.LessOrEqual(t, st.InFlight, 1, "at rest, only the slot of the next request being gathered")
}

// Under a requests-per-minute limit, the latency observed is the
// provider's, not the wait at the client's limiter (which would raise the
// limit while the limiter holds requests back), and the requests allowed
// stay within what the limit serves in that latency.
func TestCoalescerConcurrencyWithinTheRateLimit(t *testing.T) {
	t.Parallel()
	const delay = 100 * time.Millisecond
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 32, MaxBatchInputs: 4, Linger: 5 * time.Millisecond,
		RequestsPerMinute: 240}, func(c *embedder.Config) { c.RequestsPerMinute = 240 })
	concurrency(b, delay)
	var docs [][]string
	for d := range 24 {
		docs = append(docs, docTexts(d, 4))
	}
	for _, r := range callAll(t.Context(), co, docs) {
		require.NoError(t, r.err)
	}
	st := co.Stats()
	t.Logf("limit %d, latency %s, %d requests", st.Limit, st.Latency, st.Requests)
	// 4 requests/s × 0.1 s: one at the provider, one more at the limiter.
	require.Equal(t, 2, st.Limit)
	require.Less(t, st.Latency, time.Second, "the limiter's waits (about 250 ms a request) are not the provider's latency")
}

// A slow provider and a load that the floor's requests carry: texts that
// trickle in never fill a request, so no request beyond MinInFlight goes,
// and the texts that wait for a slot leave together, as with a fixed
// limit, instead of one small request per linger.
func TestCoalescerPartialRequestsKeepTheFloor(t *testing.T) {
	t.Parallel()
	const delay, linger = 200 * time.Millisecond, 10 * time.Millisecond
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 32, MaxBatchInputs: 64, Linger: linger}, nil)
	peak := concurrency(b, delay)
	done := make(chan error, 200)
	for d := range 200 {
		go func() {
			_, err := co.Embed(t.Context(), docTexts(d, 1))
			done <- err
		}()
		time.Sleep(5 * time.Millisecond)
	}
	for range 200 {
		require.NoError(t, <-done)
	}
	st := co.Stats()
	t.Logf("peak requests at the provider %d, limit %d, latency %s, %d requests for 200 inputs", peak.Load(), st.Limit, st.Latency, st.Requests)
	require.GreaterOrEqual(t, st.Limit, int(delay/linger), "full requests would get more")
	require.LessOrEqual(t, peak.Load(), int64(4), "partial requests keep to the floor")
	require.LessOrEqual(t, st.Requests, int64(200/4), "requests waiting for a slot fill meanwhile (one per linger would be about 100)")
}
