package openaitest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
)

type answer struct {
	status int
	header http.Header
	code   string
	typ    string
	msg    string
}

// post sends one embeddings request of the given inputs.
func post(t *testing.T, s *openaitest.Server, inputs ...string) answer {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": "m", "input": inputs})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/embeddings", bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var wire struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wire))
	return answer{status: resp.StatusCode, header: resp.Header, code: wire.Error.Code, typ: wire.Error.Type, msg: wire.Error.Message}
}

func headerInt(t *testing.T, h http.Header, k string) int {
	t.Helper()
	n, err := strconv.Atoi(h.Get(k))
	require.NoError(t, err, "%s: %q", k, h.Get(k))
	return n
}

func headerDuration(t *testing.T, h http.Header, k string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(h.Get(k))
	require.NoError(t, err, "%s: %q", k, h.Get(k))
	return d
}

// TestLimitsRefuseBeyondTheRequestLimit: with 60 requests a minute over a
// 10s quantum the bucket holds 10 requests and refills one a second, so
// 10 requests in a row pass, the 11th is a 429 in OpenAI's shape with the
// time to retry in both headers, and it takes nothing from the bucket.
func TestLimitsRefuseBeyondTheRequestLimit(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Limits: openaitest.Limits{RequestsPerMinute: 60, Quantum: 10 * time.Second}})
	for i := range 10 {
		a := post(t, s, "a")
		require.Equal(t, http.StatusOK, a.status, "request %d", i)
		require.Equal(t, "60", a.header.Get("x-ratelimit-limit-requests"))
		require.Equal(t, 9-i, headerInt(t, a.header, "x-ratelimit-remaining-requests"))
		// Full again once the used requests have refilled at one a second.
		reset := headerDuration(t, a.header, "x-ratelimit-reset-requests")
		require.InDelta(t, float64(i+1), reset.Seconds(), 0.5)
		require.Empty(t, a.header.Get("x-ratelimit-limit-tokens"), "no token limit, no token headers")
	}
	a := post(t, s, "a")
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, "rate_limit_exceeded", a.code)
	require.Equal(t, "requests", a.typ)
	require.Contains(t, a.msg, "Limit 60 requests per min")
	require.Equal(t, "1", a.header.Get("Retry-After"), "seconds, rounded up")
	ms := headerInt(t, a.header, "retry-after-ms")
	require.Greater(t, ms, 0)
	require.LessOrEqual(t, ms, 1000)
	require.Equal(t, 0, headerInt(t, a.header, "x-ratelimit-remaining-requests"))

	adm := s.Admissions()
	require.Len(t, adm, 11)
	for _, x := range adm[:10] {
		require.False(t, x.Throttled)
	}
	require.True(t, adm[10].Throttled)
	require.Equal(t, "requests", adm[10].Binding)
	require.Equal(t, int64(1), s.Throttled())
	require.Equal(t, int64(10), s.Inputs.Load(), "a refused request is not served")
}

// TestLimitsRefuseBeyondTheTokenLimit: tokens are counted as usage is
// (cl100k_base), a request that finds too few tokens is refused naming
// tokens, one larger than the bucket waits for a full bucket, and one
// larger than the minute's limit is refused without a time to retry (no
// wait would let it through).
func TestLimitsRefuseBeyondTheTokenLimit(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Limits: openaitest.Limits{RequestsPerMinute: 6000, TokensPerMinute: 60, Quantum: 10 * time.Second}})
	eight := strings.TrimSpace(strings.Repeat("a ", 8)) // 8 tokens
	a := post(t, s, eight)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "60", a.header.Get("x-ratelimit-limit-tokens"))
	require.Equal(t, 2, headerInt(t, a.header, "x-ratelimit-remaining-tokens"))
	require.InDelta(t, 8, headerDuration(t, a.header, "x-ratelimit-reset-tokens").Seconds(), 0.5)
	require.Equal(t, "6000", a.header.Get("x-ratelimit-limit-requests"), "both limits are reported")

	a = post(t, s, eight)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, "tokens", a.typ)
	require.Contains(t, a.msg, "Limit 60 tokens per min")
	// 6 tokens short at one token a second.
	require.Contains(t, []string{"6", "7"}, a.header.Get("Retry-After"))
	require.InDelta(t, 6000, headerInt(t, a.header, "retry-after-ms"), 500)

	a = post(t, s, "a b") // 2 tokens: the refused request took nothing
	require.Equal(t, http.StatusOK, a.status)

	// 20 tokens, more than the bucket's 10: it waits for a full bucket,
	// 10s from empty.
	a = post(t, s, strings.Repeat("a ", 20))
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Contains(t, a.msg, "Rate limit reached")
	require.Contains(t, []string{"10", "11"}, a.header.Get("Retry-After"))

	a = post(t, s, strings.Repeat("a ", 61))
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Contains(t, a.msg, "Request too large")
	require.Empty(t, a.header.Get("Retry-After"))

	adm := s.Admissions()
	require.Len(t, adm, 5)
	require.Equal(t, []bool{false, true, false, true, true}, []bool{adm[0].Throttled, adm[1].Throttled, adm[2].Throttled, adm[3].Throttled, adm[4].Throttled})
	require.Equal(t, "tokens", adm[1].Binding)
	require.Equal(t, 8, adm[0].Tokens)
	require.Equal(t, int64(10), s.Tokens.Load(), "served tokens: 8 + 2")
}

// TestLimitsRefill: the buckets refill continuously, so a client that
// waits what retry-after-ms says is served.
func TestLimitsRefill(t *testing.T) {
	t.Parallel()
	// 600 a minute over 200ms: a bucket of 2 requests, refilled one per 100ms.
	s := openaitest.New(t, openaitest.Options{Limits: openaitest.Limits{RequestsPerMinute: 600, Quantum: 200 * time.Millisecond}})
	require.Equal(t, http.StatusOK, post(t, s, "a").status)
	require.Equal(t, http.StatusOK, post(t, s, "a").status)
	a := post(t, s, "a")
	if a.status == http.StatusOK {
		t.Skip("the machine took over 100ms for two requests; the refill came first")
	}
	require.Equal(t, http.StatusTooManyRequests, a.status)
	ms := headerInt(t, a.header, "retry-after-ms")
	require.LessOrEqual(t, ms, 100)
	time.Sleep(time.Duration(ms) * time.Millisecond)
	require.Equal(t, http.StatusOK, post(t, s, "a").status)
	// Over a second the bucket refills to its capacity, never beyond it.
	time.Sleep(time.Second)
	ok := 0
	for range 4 {
		if post(t, s, "a").status == http.StatusOK {
			ok++
		}
	}
	require.GreaterOrEqual(t, ok, 2)
	require.Less(t, ok, 4, "the bucket holds 2 (plus what refills meanwhile), not a second's 10")
}

// TestLimitsDefaultQuantumIsAMinute: without Quantum the bucket holds a
// minute's requests, as OpenAI's headers count them.
func TestLimitsDefaultQuantumIsAMinute(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Limits: openaitest.Limits{RequestsPerMinute: 30}})
	a := post(t, s, "a")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, 29, headerInt(t, a.header, "x-ratelimit-remaining-requests"))
	require.InDelta(t, 2, headerDuration(t, a.header, "x-ratelimit-reset-requests").Seconds(), 0.1)
}

// TestNoLimitsNoHeaders: the zero Limits enforce nothing and record
// nothing.
func TestNoLimitsNoHeaders(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{})
	for range 3 {
		a := post(t, s, "a")
		require.Equal(t, http.StatusOK, a.status)
		require.Empty(t, a.header.Get("x-ratelimit-limit-requests"))
	}
	require.Empty(t, s.Admissions())
	require.Zero(t, s.Throttled())
}

// TestLimitsLargerThanTheBucket: with a bucket smaller than a request (a
// minute's limit enforced over a short quantum), the request goes once
// the bucket is full and leaves it owing the rest, so the next waits
// until that is paid back: the rate holds, and no request within the
// minute's limit is refused for ever.
func TestLimitsLargerThanTheBucket(t *testing.T) {
	t.Parallel()
	// 600 tokens a minute over 100ms: a bucket of 1 token, 10 a second.
	s := openaitest.New(t, openaitest.Options{Limits: openaitest.Limits{TokensPerMinute: 600, Quantum: 100 * time.Millisecond}})
	a := post(t, s, strings.TrimSpace(strings.Repeat("a ", 5))) // 5 tokens
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, 0, headerInt(t, a.header, "x-ratelimit-remaining-tokens"))
	require.InDelta(t, 0.5, headerDuration(t, a.header, "x-ratelimit-reset-tokens").Seconds(), 0.1, "full again once the 4 owed and the 1 are back")
	a = post(t, s, "a")
	require.Equal(t, http.StatusTooManyRequests, a.status)
	ms := headerInt(t, a.header, "retry-after-ms")
	require.Greater(t, ms, 300, "the 4 tokens owed come back first")
	require.LessOrEqual(t, ms, 500)
}
