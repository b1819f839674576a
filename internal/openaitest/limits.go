package openaitest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ragsync/ragsync/chunker"
)

// Limits make the server enforce an API key's rate limits the way OpenAI
// does: one token bucket for requests and one for tokens, each refilled
// continuously at its per-minute rate and holding at most Quantum's worth
// of it. A request that finds either bucket short is refused with a 429
// and takes nothing from either. A request of more tokens than the bucket
// holds (but no more than a minute's limit) goes once the bucket is full
// and leaves it owing the rest, so the rate holds over time; one of more
// than the minute's limit is refused for good ("Request too large"), as
// OpenAI refuses it. Every answer carries the x-ratelimit-* headers. The
// zero value enforces nothing.
type Limits struct {
	// RequestsPerMinute is the key's request limit; 0 is unlimited.
	RequestsPerMinute int
	// TokensPerMinute is the key's token limit, in cl100k_base tokens of
	// the inputs (counted as the server counts usage); 0 is unlimited.
	TokensPerMinute int
	// Quantum is the period over which the limits are enforced: a bucket
	// holds Quantum × rate, so a full minute's requests may arrive at once
	// with the default, and only a second's with 1s. OpenAI documents that
	// it may enforce a minute's limit over shorter periods. Defaults to a
	// minute.
	Quantum time.Duration
}

func (l Limits) enabled() bool { return l.RequestsPerMinute > 0 || l.TokensPerMinute > 0 }

// Admission is one request the limits judged: accepted (it went on to be
// answered as usual) or throttled (429).
type Admission struct {
	At        time.Time
	Tokens    int
	Throttled bool
	// Binding, for a throttled request, names the limit that refused it:
	// "requests" or "tokens".
	Binding string
}

// Admissions returns every request the limits judged, in arrival order.
// It is empty when Options.Limits is zero.
func (s *Server) Admissions() []Admission {
	if s.lim == nil {
		return nil
	}
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	return append([]Admission(nil), s.lim.log...)
}

// Throttled counts the requests the limits refused with a 429.
func (s *Server) Throttled() int64 {
	if s.lim == nil {
		return 0
	}
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	return s.lim.throttled
}

// bucket is a continuously refilled token bucket.
type bucket struct {
	rate  float64 // per second
	cap   float64
	level float64 // below 0 while it owes for a request larger than cap
	at    time.Time
	limit float64 // the minute's limit: no request may be larger
}

func newBucket(perMinute int, quantum time.Duration, now time.Time) *bucket {
	if perMinute <= 0 {
		return nil
	}
	rate := float64(perMinute) / 60
	c := rate * quantum.Seconds()
	return &bucket{rate: rate, cap: c, level: c, at: now, limit: float64(perMinute)}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.level = math.Min(b.cap, b.level+dt*b.rate)
		b.at = now
	}
}

// wait is how long until n may be taken: until the bucket holds n, or
// is full for n larger than it holds; infinite for n larger than the
// minute's limit.
func (b *bucket) wait(n float64) time.Duration {
	if n > b.limit {
		return time.Duration(math.MaxInt64)
	}
	need := min(n, b.cap)
	if need <= b.level {
		return 0
	}
	return time.Duration((need - b.level) / b.rate * float64(time.Second))
}

// reset is how long until the bucket is full again, as OpenAI's
// x-ratelimit-reset-* headers say.
func (b *bucket) reset() time.Duration {
	return time.Duration((b.cap - b.level) / b.rate * float64(time.Second))
}

type limiter struct {
	limits    Limits
	mu        sync.Mutex
	requests  *bucket
	tokens    *bucket
	log       []Admission
	throttled int64
}

func newLimiter(l Limits) *limiter {
	if !l.enabled() {
		return nil
	}
	if l.Quantum <= 0 {
		l.Quantum = time.Minute
	}
	now := time.Now()
	return &limiter{limits: l, requests: newBucket(l.RequestsPerMinute, l.Quantum, now), tokens: newBucket(l.TokensPerMinute, l.Quantum, now)}
}

// admit judges one request of the given inputs. It sets the x-ratelimit-*
// headers on w and, when the request is refused, writes the 429 and
// returns false.
func (l *limiter) admit(w http.ResponseWriter, inputs []string) bool {
	tokens := 0
	for _, in := range inputs {
		tokens += chunker.CountTokens(in)
	}
	now := time.Now()
	l.mu.Lock()
	var wait time.Duration
	binding := ""
	for _, b := range []struct {
		name string
		b    *bucket
		n    float64
	}{{"requests", l.requests, 1}, {"tokens", l.tokens, float64(tokens)}} {
		if b.b == nil {
			continue
		}
		b.b.refill(now)
		if d := b.b.wait(b.n); d > wait {
			wait, binding = d, b.name
		}
	}
	ok := wait == 0
	if ok {
		if l.requests != nil {
			l.requests.level--
		}
		if l.tokens != nil {
			l.tokens.level -= float64(tokens)
		}
	} else {
		l.throttled++
	}
	l.log = append(l.log, Admission{At: now, Tokens: tokens, Throttled: !ok, Binding: binding})
	h := w.Header()
	if b := l.requests; b != nil {
		h.Set("x-ratelimit-limit-requests", strconv.Itoa(l.limits.RequestsPerMinute))
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(math.Max(b.level, 0))))
		h.Set("x-ratelimit-reset-requests", resetString(b.reset()))
	}
	if b := l.tokens; b != nil {
		h.Set("x-ratelimit-limit-tokens", strconv.Itoa(l.limits.TokensPerMinute))
		h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(math.Max(b.level, 0))))
		h.Set("x-ratelimit-reset-tokens", resetString(b.reset()))
	}
	l.mu.Unlock()
	if ok {
		return true
	}
	if wait == time.Duration(math.MaxInt64) {
		// No wait lets this request through: OpenAI answers 429 without a
		// time to retry at.
		writeRateLimit(w, "tokens", fmt.Sprintf("Request too large: %d tokens requested, limit %d tokens per min.", tokens, l.limits.TokensPerMinute))
		return false
	}
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
	limit, used := l.limits.RequestsPerMinute, "requests"
	if binding == "tokens" {
		limit, used = l.limits.TokensPerMinute, "tokens"
	}
	writeRateLimit(w, used, fmt.Sprintf("Rate limit reached on this key: Limit %d %s per min. Please try again in %s.", limit, used, resetString(wait)))
	return false
}

func writeRateLimit(w http.ResponseWriter, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": "rate_limit_exceeded"},
	})
}

// resetString renders a duration as OpenAI's reset headers do ("1s",
// "6m0s", "120ms"), rounded up to the millisecond so that a client waiting
// that long finds the capacity back.
func resetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond).String()
}
