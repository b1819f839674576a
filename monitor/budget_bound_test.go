package monitor_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/monitor"
)

// growingLag is a member of a 3-member group holding 2 of 6 partitions
// whose lag grows by 100 records at every read.
type growingLag struct {
	mu    sync.Mutex
	reads int64
}

func (g *growingLag) Lag(context.Context) (map[string]map[int32]int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	n := 500 + 100*g.reads
	return map[string]map[int32]int64{"t": {0: n, 1: n}}, nil
}

func (g *growingLag) Partitions(context.Context) (int, error) { return 6, nil }

// TestBudgetBoundCapsTheRecommendation: two checks a minute apart with a
// growing lag. When the live lane waited for the provider budget half the
// window, the budget event is exceeded naming what binds and the fix, and
// the replica recommendation stays at the current count with the reason;
// when it did not wait (the fleet is CPU- or Postgres-bound), the same lag
// still asks for more replicas.
func TestBudgetBoundCapsTheRecommendation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		bound bool
	}{
		{name: "budget-bound", wait: 30 * time.Second, bound: true},
		{name: "cpu-bound", wait: 0, bound: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			changes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ragsync_pipeline_changes_total"}, []string{"outcome"})
			reg.MustRegister(changes)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var mu sync.Mutex
			reading := monitor.ProviderBudget{Mode: "shared", Members: 3, RequestsPerMinute: 600, TokensPerMinute: 1_000_000}
			m, err := monitor.New(t.Context(), monitor.Config{SampleSize: -1, Registerer: reg,
				Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))},
				monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb, Gatherer: reg,
					Lag: &growingLag{}, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
					Budget: func() monitor.ProviderBudget { mu.Lock(); defer mu.Unlock(); return reading }})
			require.NoError(t, err)
			ctx := ctxT(t)
			st, err := m.Check(ctx, monitor.CheckOptions{NoSave: true})
			require.NoError(t, err)
			require.Nil(t, st.Budget, "one reading is no window")

			mu.Lock()
			now = now.Add(time.Minute)
			reading.Live.Wait += tc.wait
			reading.Live.Requests += 150
			reading.All.Requests += 200 // 600 a minute over 3 members: the whole limit
			reading.All.Tokens += 20_000
			mu.Unlock()
			changes.WithLabelValues("applied").Add(600) // 10 changes/s here
			st, err = m.Check(ctx, monitor.CheckOptions{NoSave: true})
			require.NoError(t, err)

			require.NotNil(t, st.Budget)
			require.NotNil(t, st.Lag)
			require.Equal(t, 3, st.Lag.Replicas)
			ev := event(t, st, monitor.TagBudget, "live_wait_share")
			lag := event(t, st, monitor.TagLag, "recommended_replicas")
			require.Equal(t, tc.bound, ev.Signal.Exceeded)
			require.Equal(t, tc.bound, ev.Changed)
			require.InDelta(t, 0.25, ev.Signal.Threshold, 1e-9, "the default monitor.budget_bound_share")
			require.InDelta(t, b2f(tc.bound), gauge(t, reg, "ragsync_monitor_budget_bound"), 0)
			if tc.bound {
				require.InDelta(t, 0.5, ev.Signal.Score, 1e-9)
				require.Equal(t, "requests_per_minute", ev.Signal.Binds)
				require.Contains(t, ev.Signal.Fix, "requests-per-minute limit")
				require.Contains(t, ev.Signal.Fix, "batch lane")
				require.Equal(t, 3, st.Lag.Recommended, "replicas sharing the budget cannot help")
				require.Greater(t, st.Lag.Uncapped, 3, "the lag alone asks for more")
				require.Contains(t, st.Lag.CappedBy, "requests_per_minute")
				require.False(t, lag.Signal.Exceeded)
				require.InDelta(t, float64(st.Lag.Uncapped), lag.Signal.Details["uncapped_replicas"], 0)
			} else {
				require.Empty(t, ev.Signal.Binds)
				require.Greater(t, st.Lag.Recommended, 3, "a fleet the budget does not bind gets more replicas")
				require.Empty(t, st.Lag.CappedBy)
				require.True(t, lag.Signal.Exceeded)
			}
			require.InDelta(t, float64(st.Lag.Recommended), gauge(t, reg, "ragsync_monitor_recommended_replicas"), 0)

			// What `ragsync monitor` prints.
			var out bytes.Buffer
			require.NoError(t, st.Write(&out, false))
			require.Contains(t, out.String(), "provider budget (shared, 3 members): live lane waited")
			if tc.bound {
				require.Contains(t, out.String(), "BOUND by requests_per_minute: raise the provider's")
				require.Contains(t, out.String(), "recommended replicas: 3, not the")
			} else {
				require.NotContains(t, out.String(), "BOUND")
				require.NotContains(t, out.String(), "recommended replicas:")
			}
		})
	}
}

func event(t *testing.T, st monitor.Status, tag, method string) monitor.Event {
	t.Helper()
	for _, e := range st.Events {
		if e.SemanticTag == tag && e.Signal.Method == method {
			return e
		}
	}
	t.Fatalf("no %s/%s event among %d", tag, method, len(st.Events))
	return monitor.Event{}
}

// gauge reads a gauge without labels from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
