package embedder_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// arrivals records when each request reached the server and its tokens.
type arrivals struct {
	mu     sync.Mutex
	at     []time.Time
	tokens []int
}

func (a *arrivals) hook(r openaitest.Request) *openaitest.Fault {
	n := 0
	for _, in := range r.Input {
		n += chunker.CountTokens(in)
	}
	a.mu.Lock()
	a.at, a.tokens = append(a.at, time.Now()), append(a.tokens, n)
	a.mu.Unlock()
	return nil
}

// CheckBucket asserts the token-bucket bound: over every interval between
// two arrivals, the amount sent is at most burst + rate×length (+ slack for
// the network between the client's limiter and the server's clock).
func CheckBucket(t *testing.T, at []time.Time, amount []int, burst int, perMinute int, slack float64) {
	t.Helper()
	for i := range at {
		sum := 0
		for j := i; j < len(at); j++ {
			sum += amount[j]
			allowed := float64(burst) + float64(perMinute)/60*at[j].Sub(at[i]).Seconds() + slack
			require.LessOrEqual(t, float64(sum), allowed, "requests %d..%d sent %d in %s", i, j, sum, at[j].Sub(at[i]))
		}
	}
}

func TestRateLimitsNeverExceeded(t *testing.T) {
	const rpm, tpm = 1200, 6000 // 20 req/s (burst 20), 100 tokens/s (burst 1000)
	c, b := setup(t, openaitest.Options{}, true, func(cfg *embedder.Config) {
		cfg.RequestsPerMinute, cfg.TokensPerMinute, cfg.MaxBatchInputs = rpm, tpm, 1
	})
	var a arrivals
	b.srv.SetHook(a.hook)
	var g errgroup.Group
	for i := range 8 {
		g.Go(func() error {
			_, err := c.Embed(t.Context(), someTexts(8+i))
			return err
		})
	}
	require.NoError(t, g.Wait())
	ones := make([]int, len(a.at))
	for i := range ones {
		ones[i] = 1
	}
	// The server stamps arrivals, not the limiter's grants: on a loaded
	// machine one request can reach it up to ~150ms late and compress the
	// interval the others are judged over, so each bound allows that much
	// time on top of one request. Without a limiter the 64 requests would
	// arrive within milliseconds, far past either bound.
	const jitter = 0.15 // seconds
	CheckBucket(t, a.at, ones, embedder.RequestBurst(rpm), rpm, 1+rpm/60*jitter)
	CheckBucket(t, a.at, a.tokens, embedder.TokenBurst(tpm), tpm, float64(max(a.tokens[0], 20))+tpm/60*jitter)
	require.Positive(t, c.Stats().LimitWait, "the limits made the client wait")
}

func TestCheckBucketCatchesABurst(t *testing.T) {
	// The checker itself must fail on a burst over the bound.
	now := time.Now()
	at := []time.Time{now, now, now}
	ft := &testing.T{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckBucket(ft, at, []int{1, 1, 1}, 2, 60, 0)
	}()
	<-done
	require.True(t, ft.Failed())
}

func TestBatchTooLargeIsSplit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  openaitest.Options
		fault *openaitest.Fault
	}{
		{name: "400 too many inputs", opts: openaitest.Options{MaxInputs: 3}},
		{name: "400 too many tokens", opts: openaitest.Options{MaxTokens: 60}},
		{name: "413", fault: &openaitest.Fault{Status: http.StatusRequestEntityTooLarge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, b := setup(t, tc.opts, false, func(cfg *embedder.Config) { cfg.MaxBatchInputs = 16 })
			if tc.fault != nil {
				b.srv.FailNext(1, *tc.fault)
			}
			texts := someTexts(10)
			vecs, err := c.Embed(t.Context(), texts)
			require.NoError(t, err)
			require.Len(t, vecs, 10)
			require.Positive(t, c.Stats().Splits)
			served := 0
			for _, r := range b.srv.Served() {
				served += len(r.Input)
				if tc.opts.MaxInputs > 0 {
					require.LessOrEqual(t, len(r.Input), tc.opts.MaxInputs)
				}
			}
			require.Equal(t, 10, served, "every input embedded exactly once")
		})
	}
}

func TestOtherBadRequestIsNotSplit(t *testing.T) {
	c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) { cfg.MaxBatchInputs = 16 })
	b.srv.FailNext(1, openaitest.Fault{Status: http.StatusBadRequest}) // "injected fault 400"
	_, err := c.Embed(t.Context(), someTexts(8))
	require.Error(t, err)
	require.Zero(t, c.Stats().Splits)
	require.EqualValues(t, 1, b.srv.Requests.Load())
}

func longText(tokens int) string {
	var sb strings.Builder
	for i := 0; chunker.CountTokens(sb.String()) < tokens; i++ {
		fmt.Fprintf(&sb, "word%d alpha beta gamma delta epsilon zeta eta theta iota kappa lambda ", i)
		for range 50 {
			fmt.Fprintf(&sb, "tok%d ", i)
		}
	}
	return sb.String()
}

func TestTooLongInput(t *testing.T) {
	long := longText(300)
	t.Run("truncate", func(t *testing.T) {
		c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) { cfg.MaxInputTokens = 100 })
		vecs, err := c.Embed(t.Context(), []string{"short one", long})
		require.NoError(t, err)
		require.Len(t, vecs, 2)
		require.EqualValues(t, 1, c.Stats().Truncated)
		sent := b.srv.Served()[0].Input[1]
		require.LessOrEqual(t, chunker.CountTokens(sent), 100)
		require.True(t, strings.HasPrefix(long, sent[:20]), "the head is kept")
	})
	t.Run("dead_letter", func(t *testing.T) {
		c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) {
			cfg.MaxInputTokens, cfg.OnTooLong = 100, embedder.TooLongDeadLetter
		})
		_, err := c.Embed(t.Context(), []string{long})
		var ie *embedder.InputError
		require.ErrorAs(t, err, &ie)
		require.True(t, ie.Permanent())
		require.Zero(t, b.srv.Requests.Load())
	})
}

// TestRateLimitsHoldUnderFaults: retries pass the limits too, so a flaky
// provider (30% 429/500/drops) never sees more than the bucket allows.
func TestRateLimitsHoldUnderFaults(t *testing.T) {
	const rpm = 1200
	c, b := setup(t, openaitest.Options{}, true, func(cfg *embedder.Config) {
		cfg.RequestsPerMinute, cfg.MaxBatchInputs, cfg.MaxRetries = rpm, 1, 50
	})
	var a arrivals
	var n int
	var mu sync.Mutex
	b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		a.hook(r)
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n % 10 {
		case 1:
			return &openaitest.Fault{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After-Ms": {"10"}}}
		case 4:
			return &openaitest.Fault{Status: http.StatusInternalServerError, Header: http.Header{"Retry-After-Ms": {"10"}}}
		case 7:
			return &openaitest.Fault{Drop: true}
		}
		return nil
	})
	var g errgroup.Group
	for range 4 {
		g.Go(func() error { _, err := c.Embed(t.Context(), someTexts(10)); return err })
	}
	require.NoError(t, g.Wait())
	require.Positive(t, c.Stats().Retries)
	ones := make([]int, len(a.at))
	for i := range ones {
		ones[i] = 1
	}
	CheckBucket(t, a.at, ones, embedder.RequestBurst(rpm), rpm, 1)
}
