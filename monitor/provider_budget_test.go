package monitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBudgetBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	limits := ProviderBudget{Mode: "shared", Members: 2, RequestsPerMinute: 600, TokensPerMinute: 60000}
	// read is limits after a minute with the live lane's wait and 429s,
	// and the requests and tokens this process sent (every lane).
	read := func(wait time.Duration, throttled, requests, tokens int64) ProviderBudget {
		r := limits
		r.Live = BudgetLane{Wait: wait, Throttled: throttled}
		r.All = BudgetLane{Requests: requests, Tokens: tokens}
		return r
	}
	tests := []struct {
		name      string
		limits    func(*ProviderBudget)
		cur       ProviderBudget
		wantBound bool
		wantBinds string
		wantShare float64
	}{
		{name: "idle", cur: read(0, 0, 0, 0)},
		{name: "short waits are not bound", cur: read(10*time.Second, 0, 300, 3000), wantShare: 10.0 / 60},
		{name: "requests bind", cur: read(30*time.Second, 0, 300, 3000), wantBound: true, wantBinds: "requests_per_minute", wantShare: 0.5},
		{name: "tokens bind", cur: read(30*time.Second, 0, 30, 30000), wantBound: true, wantBinds: "tokens_per_minute", wantShare: 0.5},
		{name: "a 429 is bound whatever the wait", cur: read(0, 1, 300, 3000), wantBound: true, wantBinds: "requests_per_minute"},
		{name: "429s without limits: the provider binds", limits: func(p *ProviderBudget) { p.RequestsPerMinute, p.TokensPerMinute = 0, 0 },
			cur: read(0, 3, 300, 3000), wantBound: true, wantBinds: "provider"},
		{name: "waits without limits: the concurrency bound", limits: func(p *ProviderBudget) { p.RequestsPerMinute, p.TokensPerMinute = 0, 0 },
			cur: read(time.Minute, 0, 300, 3000), wantBound: true, wantBinds: "max_concurrency", wantShare: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b budgetTracker
			start, cur := limits, tc.cur
			if tc.limits != nil {
				tc.limits(&start)
				tc.limits(&cur)
			}
			_, ok := b.observe(t0, start, DefaultBudgetBoundShare)
			require.False(t, ok, "the first reading only starts the window")
			st, ok := b.observe(t0.Add(time.Minute), cur, DefaultBudgetBoundShare)
			require.True(t, ok)
			require.Equal(t, tc.wantBound, st.Bound)
			require.Equal(t, tc.wantBinds, st.Binds)
			require.InDelta(t, tc.wantShare, st.LiveWaitShare, 1e-9)
			if tc.wantBound {
				require.Contains(t, st.Fix, "more replicas cannot help")
			} else {
				require.Empty(t, st.Fix)
			}
		})
	}
}

// TestBudgetUseIsTheFleets: this process's rate times the members, over
// the key's limit; a counter that went back (a rebuilt client) counts
// from zero instead of going negative.
func TestBudgetUseIsTheFleets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b budgetTracker
	p := ProviderBudget{Mode: "shared", Members: 4, RequestsPerMinute: 1000, All: BudgetLane{Requests: 1000}, Live: BudgetLane{Wait: time.Hour}}
	b.observe(t0, p, 0.25)
	p.All.Requests += 250
	p.Live.Wait += 15 * time.Second
	st, _ := b.observe(t0.Add(time.Minute), p, 0.25)
	require.InDelta(t, 1.0, st.RequestsUse, 1e-9, "250 a minute here, 4 members, of 1000")
	require.Equal(t, 4, st.Members)
	require.True(t, st.Bound)

	p.All.Requests, p.Live.Wait = 10, 6*time.Second
	st, _ = b.observe(t0.Add(2*time.Minute), p, 0.25)
	require.InDelta(t, 0.04, st.RequestsUse, 1e-9)
	require.InDelta(t, 0.1, st.LiveWaitShare, 1e-9)
	require.False(t, st.Bound)
}

func TestCapReplicas(t *testing.T) {
	bound := BudgetStatus{Bound: true, Binds: "tokens_per_minute"}
	ls := LagStatus{Replicas: 3, Recommended: 5}
	capReplicas(&ls, bound)
	require.Equal(t, 3, ls.Recommended)
	require.Equal(t, 5, ls.Uncapped)
	require.Contains(t, ls.CappedBy, "tokens_per_minute")

	ls = LagStatus{Replicas: 3, Recommended: 5}
	capReplicas(&ls, BudgetStatus{})
	require.Equal(t, 5, ls.Recommended, "not bound: the lag decides")
	require.Empty(t, ls.CappedBy)

	ls = LagStatus{Replicas: 3, Recommended: 2}
	capReplicas(&ls, bound)
	require.Equal(t, 2, ls.Recommended, "a recommendation to shrink stands")
	require.Empty(t, ls.CappedBy)
}

// TestBudgetBoundShareConfig: the default applies when unset, and a
// negative share is refused by its YAML path.
func TestBudgetBoundShareConfig(t *testing.T) {
	require.InDelta(t, DefaultBudgetBoundShare, Config{}.WithDefaults().BudgetBoundShare, 0)
	require.InDelta(t, 0.5, Config{BudgetBoundShare: 0.5}.WithDefaults().BudgetBoundShare, 0)
	err := Config{BudgetBoundShare: -1}.WithDefaults().Validate()
	require.ErrorContains(t, err, "monitor.budget_bound_share: -1 must be > 0")
	require.NoError(t, Config{}.WithDefaults().Validate())
}
