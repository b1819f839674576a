package embedder

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// limits are the client-side rate limits: a token bucket for requests and
// one for tokens, each refilled at its per-minute rate. A bucket holds at
// most one second's worth of requests and ten seconds' worth of tokens, so
// over any interval of length T the client sends at most
// burst + rate×T of either — the invariant the tests check against the
// server's observed timestamps. A nil bucket means no limit.
type limits struct {
	requests *rate.Limiter
	tokens   *rate.Limiter
}

// RequestBurst and TokenBurst are the bucket sizes for the per-minute
// limits rpm and tpm (0: unlimited, burst 0).
func RequestBurst(rpm int) int { return max(1, rpm/60) }

// TokenBurst is ten seconds' worth of tpm, at least 1. A batch never holds
// more tokens than this (MaxBatchTokens is lowered to it), so every request
// fits in the bucket.
func TokenBurst(tpm int) int { return max(1, tpm/6) }

func newLimits(rpm, tpm int) limits {
	var l limits
	if rpm > 0 {
		l.requests = rate.NewLimiter(rate.Limit(float64(rpm)/60), RequestBurst(rpm))
	}
	if tpm > 0 {
		l.tokens = rate.NewLimiter(rate.Limit(float64(tpm)/60), TokenBurst(tpm))
	}
	return l
}

// wait blocks until a request of n tokens may go, and returns how long it
// waited. A request over the token burst (a single input longer than ten
// seconds' worth) waits for a full bucket instead of failing.
func (l limits) wait(ctx context.Context, n int) (time.Duration, error) {
	if l.requests == nil && l.tokens == nil {
		return 0, nil
	}
	start := time.Now()
	if l.requests != nil {
		if err := l.requests.Wait(ctx); err != nil {
			return time.Since(start), err
		}
	}
	if l.tokens != nil {
		if err := l.tokens.WaitN(ctx, min(max(n, 1), l.tokens.Burst())); err != nil {
			return time.Since(start), err
		}
	}
	return time.Since(start), nil
}

// waitAll is wait for a request larger than the token burst too: it
// takes the tokens in installments of at most the burst, so the request is
// never refused and never counted short (a degraded process's share of
// the burst may be smaller than a request).
func (l limits) waitAll(ctx context.Context, n int) error {
	if l.requests != nil {
		if err := l.requests.Wait(ctx); err != nil {
			return err
		}
	}
	if l.tokens == nil {
		return nil
	}
	for n = max(n, 1); n > 0; {
		piece := min(n, l.tokens.Burst())
		if err := l.tokens.WaitN(ctx, piece); err != nil {
			return err
		}
		n -= piece
	}
	return nil
}
