package embedder_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestBudgetConfigErrors: each invalid budget setting is reported with its
// YAML path and the fix, all at once.
func TestBudgetConfigErrors(t *testing.T) {
	tests := []struct {
		name   string
		budget embedder.BudgetConfig
		want   []string
	}{
		{"defaults are valid", embedder.BudgetConfig{}, nil},
		{"a Redis URL", embedder.BudgetConfig{RedisURL: "redis://127.0.0.1:6379/0", MaxConcurrency: 8}, nil},
		{"not a Redis URL", embedder.BudgetConfig{RedisURL: "http://user:pw@host/0"},
			[]string{"embedder.budget.redis_url:", "e.g. redis://127.0.0.1:6379/0"}},
		{"negative concurrency", embedder.BudgetConfig{MaxConcurrency: -1}, []string{"embedder.budget.max_concurrency: must be >= 0"}},
		{"share over one", embedder.BudgetConfig{Shares: embedder.LaneShares{Live: 1, Debt: 1.5, Backfill: 0.25}},
			[]string{"embedder.budget.shares.debt: must be in (0, 1]", "embedder.budget.shares: live 1, debt 1.5, backfill 0.25 must not increase"}},
		{"negative share", embedder.BudgetConfig{Shares: embedder.LaneShares{Backfill: -0.1}}, []string{"embedder.budget.shares.backfill: must be in (0, 1]"}},
		{"backfill deeper than debt", embedder.BudgetConfig{Shares: embedder.LaneShares{Debt: 0.2, Backfill: 0.5}},
			[]string{"embedder.budget.shares: live 1, debt 0.2, backfill 0.5 must not increase from live to backfill"}},
		{"key with a space", embedder.BudgetConfig{Key: "my key"}, []string{"embedder.budget.key:", "leave it empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := embedder.Config{Provider: "openai", Model: "m", Dimensions: 8, APIKey: "sk-x", Budget: tc.budget}.WithDefaults()
			err := cfg.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "pw@", "the URL's password is redacted")
		})
	}
	// The default key is the same for the same provider key, differs for
	// another, and never holds the key itself.
	k := func(url, key string) string {
		return embedder.Config{BaseURL: url, APIKey: key}.WithDefaults().BudgetConfig().Key
	}
	require.Equal(t, k("https://a/v1", "sk-1"), k("https://a/v1", "sk-1"))
	require.NotEqual(t, k("https://a/v1", "sk-1"), k("https://a/v1", "sk-2"))
	require.NotEqual(t, k("https://a/v1", "sk-1"), k("https://b/v1", "sk-1"))
	require.NotContains(t, k("https://a/v1", "sk-secret"), "sk-secret")
}

// TestCoalescedRequestTakesTheHighestLane: a shared request is admitted in
// the highest lane among the calls it carries; calls naming no lane are
// in CoalesceConfig.Lane.
func TestCoalescedRequestTakesTheHighestLane(t *testing.T) {
	tests := []struct {
		name  string
		lanes []*embedder.Lane // nil: the call names no lane
		want  embedder.Lane
	}{
		{"live beside backfill", []*embedder.Lane{ptr(embedder.LaneLive), nil}, embedder.LaneLive},
		{"debt beside backfill", []*embedder.Lane{nil, ptr(embedder.LaneDebt)}, embedder.LaneDebt},
		{"none named: the default", []*embedder.Lane{nil, nil}, embedder.LaneBackfill},
		{"live beside debt", []*embedder.Lane{ptr(embedder.LaneDebt), ptr(embedder.LaneLive)}, embedder.LaneLive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) { cfg.Lane = embedder.LaneBackfill })
			co := embedder.NewCoalescer(c, embedder.CoalesceConfig{Linger: 300 * time.Millisecond, Lane: embedder.LaneBackfill})
			defer co.Close()
			var g errgroup.Group
			for i, l := range tc.lanes {
				ctx := t.Context()
				if l != nil {
					ctx = embedder.WithLane(ctx, *l)
				}
				g.Go(func() error {
					_, err := co.Embed(ctx, someTexts(i + 1)[i:])
					return err
				})
			}
			require.NoError(t, g.Wait())
			require.EqualValues(t, 1, b.srv.Requests.Load(), "the calls shared one request")
			st := c.Budget()
			for _, l := range []embedder.Lane{embedder.LaneLive, embedder.LaneDebt, embedder.LaneBackfill} {
				want := int64(0)
				if l == tc.want {
					want = 1
				}
				require.Equal(t, want, st.Lanes[l].Requests, "requests in lane %s", l)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestRetryAfterDateReadsTheServersClock: an HTTP-date Retry-After is
// read against the reply's Date, so a server whose clock is an hour ahead
// of ours still gets the two seconds it asked for.
func TestRetryAfterDateReadsTheServersClock(t *testing.T) {
	c, b := setup(t, openaitest.Options{}, false, nil)
	server := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	b.srv.FailNext(1, openaitest.Fault{Status: 429, RetryAfter: server.Add(2 * time.Second).Format(http.TimeFormat),
		Header: http.Header{"Date": {server.Format(http.TimeFormat)}}})
	_, err := c.Embed(t.Context(), someTexts(1))
	require.NoError(t, err)
	require.Equal(t, []time.Duration{2 * time.Second}, b.Waits())
	require.EqualValues(t, 1, c.Budget().Lanes[embedder.LaneLive].Throttled)
}

// TestSpentLimitPausesTheProcess: without Redis, a reply saying a limit is
// spent (x-ratelimit-remaining-requests: 0) holds back the process's other
// requests, not only a retried one: until the reset it names, or, when the
// reply also gives the limit, only until one request's worth has refilled
// at that rate (60 a minute: a second), not for the whole minute the
// provider's bucket needs to be full again.
func TestSpentLimitPausesTheProcess(t *testing.T) {
	for _, tc := range []struct {
		name     string
		header   http.Header
		min, max time.Duration
	}{
		{"reset", http.Header{"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"1s"}},
			950 * time.Millisecond, 10 * time.Second},
		{"one request's worth", http.Header{"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"1m0s"},
			"X-Ratelimit-Limit-Requests": {"60"}}, 950 * time.Millisecond, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, b := setup(t, openaitest.Options{}, true, func(cfg *embedder.Config) { cfg.RequestsPerMinute = 6000 })
			var mu sync.Mutex
			var at []time.Time
			first := true
			b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, time.Now())
				if first {
					first = false
					return &openaitest.Fault{Header: tc.header}
				}
				return nil
			})
			_, err := c.Embed(t.Context(), someTexts(1))
			require.NoError(t, err)
			_, err = c.Embed(t.Context(), []string{"another text"})
			require.NoError(t, err)
			require.Len(t, at, 2)
			gap := at[1].Sub(at[0])
			require.GreaterOrEqual(t, gap, tc.min, "the next request waited for the limit")
			require.Less(t, gap, tc.max, "the next request did not wait for the whole reset")
			require.Equal(t, embedder.BudgetLocal, c.Budget().Mode)
			require.Positive(t, c.Budget().Lanes[embedder.LaneLive].Wait)
		})
	}
}

// TestBudgetModes: none without limits, local with per-process ones.
func TestBudgetModes(t *testing.T) {
	c, _ := setup(t, openaitest.Options{}, false, nil)
	require.Equal(t, embedder.BudgetNone, c.Budget().Mode)
	require.Equal(t, 1, c.Budget().Members)
	c, _ = setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) { cfg.TokensPerMinute = 1000 })
	require.Equal(t, embedder.BudgetLocal, c.Budget().Mode)
	_, err := c.Embed(embedder.WithLane(context.Background(), embedder.LaneDebt), someTexts(2))
	require.NoError(t, err)
	st := c.Budget()
	require.EqualValues(t, 1, st.Lanes[embedder.LaneDebt].Requests)
	require.Positive(t, st.Lanes[embedder.LaneDebt].Tokens)
	require.Zero(t, st.Lanes[embedder.LaneLive].Requests)
	require.True(t, strings.Contains(embedder.LaneBackfill.String(), "backfill"))
	// A lane past the last counts as the last, never out of range.
	_, err = c.Embed(embedder.WithLane(context.Background(), embedder.Lane(9)), someTexts(1))
	require.NoError(t, err)
	require.EqualValues(t, 1, c.Budget().Lanes[embedder.LaneBackfill].Requests)
}

// TestBudgetBoundsRequestsInFlight: two clients on one budget with
// max_concurrency 3 never have more than 3 requests at the provider
// together, and a backfill client no more than its share (0.25 × 4 → 1).
func TestBudgetBoundsRequestsInFlight(t *testing.T) {
	redisURL, prefix := budgetKeys(t)
	srv := openaitest.New(t, openaitest.Options{})
	var mu sync.Mutex
	var busy, most int
	srv.SetHook(func(openaitest.Request) *openaitest.Fault {
		mu.Lock()
		busy++
		most = max(most, busy)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		busy--
		mu.Unlock()
		return nil
	})
	client := func(conc int, lane embedder.Lane) *embedder.OpenAI {
		c, err := embedder.NewOpenAI(embedder.Config{Provider: "openai", BaseURL: srv.URL, Model: "text-embedding-3-small", Dimensions: 16,
			Timeout: 5 * time.Second, Lane: lane, Budget: embedder.BudgetConfig{RedisURL: redisURL, Prefix: prefix, Key: "k", MaxConcurrency: conc}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	run := func(cs ...*embedder.OpenAI) {
		var g errgroup.Group
		for _, c := range cs {
			for i := range 6 {
				g.Go(func() error {
					_, err := c.Embed(t.Context(), []string{"text " + strings.Repeat("x", i)})
					return err
				})
			}
		}
		require.NoError(t, g.Wait())
	}
	run(client(3, embedder.LaneLive), client(3, embedder.LaneLive))
	require.Equal(t, 3, most, "requests in flight at the provider")
	most = 0
	run(client(4, embedder.LaneBackfill))
	require.Equal(t, 1, most, "backfill requests in flight at the provider")
}
