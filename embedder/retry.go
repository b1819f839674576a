package embedder

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

const (
	backoffBase = 500 * time.Millisecond
	backoffCap  = 30 * time.Second
	// maxServerWait bounds a server-requested wait, so a bogus header
	// cannot park a batch for hours; ctx bounds it further.
	maxServerWait = 10 * time.Minute
)

// backoff returns the wait before retry number attempt+1: exponential from
// backoffBase, capped at backoffCap, with jitter over its upper half so
// that clients that failed together do not retry together.
func backoff(attempt int) time.Duration {
	d := backoffCap
	if attempt < 16 {
		d = min(backoffBase<<attempt, backoffCap)
	}
	return d/2 + rand.N(d/2+1)
}

// serverWait reads how long the server asked us to wait, in order of
// precision: retry-after-ms (OpenAI, Azure), Retry-After as seconds or an
// HTTP date (RFC 9110 §10.2.3), then the later of OpenAI's
// x-ratelimit-reset-requests and x-ratelimit-reset-tokens ("1s", "6m0s").
func serverWait(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	clamp := func(d time.Duration) (time.Duration, bool) { return min(max(d, 0), maxServerWait), true }
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return clamp(time.Duration(ms * float64(time.Millisecond)))
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			return clamp(time.Duration(s * float64(time.Second)))
		}
		if t, err := http.ParseTime(v); err == nil {
			return clamp(t.Sub(now))
		}
	}
	var wait time.Duration
	found := false
	for _, k := range []string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		if d, err := time.ParseDuration(h.Get(k)); err == nil {
			wait, found = max(wait, d), true
		}
	}
	if found {
		return clamp(wait)
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// replyTime is the reply's own Date header, else the local clock: an
// HTTP-date Retry-After is then read against the server's clock, so a
// skewed local clock neither drops nor stretches the wait.
func replyTime(h http.Header) time.Time {
	if h != nil {
		if t, err := http.ParseTime(h.Get("Date")); err == nil {
			return t
		}
	}
	return time.Now()
}

// spentWait reads a reply that says a limit is spent: its
// x-ratelimit-remaining-requests or -tokens is 0. The wait is what the
// next request needs to refill at the limit's own per-minute rate
// (x-ratelimit-limit-*: one request, or this request's tokens), never
// longer than the matching x-ratelimit-reset-*, which OpenAI defines as
// the time until the limit is back to its initial state: waiting for that
// would leave the budget refilled meanwhile unused. Without the limit's
// header the reset is the wait. The later of the two limits wins.
func spentWait(h http.Header, tokens int) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	var wait time.Duration
	found := false
	for _, k := range []string{"Requests", "Tokens"} {
		if h.Get("X-Ratelimit-Remaining-"+k) != "0" {
			continue
		}
		d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-" + k))
		if err != nil {
			continue
		}
		need := 1
		if k == "Tokens" {
			need = max(tokens, 1)
		}
		if limit, err := strconv.Atoi(h.Get("X-Ratelimit-Limit-" + k)); err == nil && limit > 0 {
			d = min(d, time.Duration(float64(time.Minute)*float64(need)/float64(limit)))
		}
		wait, found = max(wait, min(max(d, 0), maxServerWait)), true
	}
	return wait, found
}
