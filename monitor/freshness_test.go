package monitor_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/monitor"
)

// freshnessMonitor is a monitor of b's index with a freshness target,
// reading the pipeline's metrics from b.reg and its backlog from backlog.
func freshnessMonitor(t *testing.T, b *bundle, target time.Duration, backlog func() monitor.Backlog) *monitor.Monitor {
	t.Helper()
	cfg := monitor.Config{SampleSize: -1, Registerer: b.reg,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	m, err := monitor.New(t.Context(), cfg, monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb,
		Gatherer: b.reg, FreshnessTarget: target, Backlog: backlog})
	require.NoError(t, err)
	return m
}

// TestFreshnessSignal: with a 2s target, the freshness signal is exceeded
// while the p99 freshness of the changes applied since the previous check
// is over it, or while the watermark's age (the worst lane) is, and not
// otherwise; changed follows the alarm's flips; the details and the stage
// carry the backlog.
func TestFreshnessSignal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	fresh := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ragsync_pipeline_freshness_seconds",
		Buckets: []float64{0.1, 0.5, 1, 2, 5, 10},
	}, []string{"source", "index"})
	b.reg.MustRegister(fresh)
	backlog := monitor.Backlog{Pending: 3, OldestAge: 7 * time.Second, Stage: "provider"}
	m := freshnessMonitor(t, b, 2*time.Second, func() monitor.Backlog { return backlog })

	check := func() monitor.Event {
		t.Helper()
		st, err := m.Check(ctx, monitor.CheckOptions{})
		require.NoError(t, err)
		e := findEvent(t, st.Events, monitor.TagFreshness, "p99_or_watermark_age_seconds")
		require.Equal(t, 2.0, e.Signal.Threshold)
		return e
	}

	e := check()
	require.False(t, e.Signal.Exceeded, "nothing applied, no watermark: nothing known to be late")
	require.False(t, e.Changed)
	require.Zero(t, e.Signal.Score)
	require.Equal(t, map[string]float64{"freshness_p99_seconds": 0, "watermark_age_seconds": 0,
		"backlog_changes": 3, "backlog_oldest_seconds": 7}, e.Signal.Details)
	require.Equal(t, "provider", e.Signal.Stage)

	for range 100 {
		fresh.WithLabelValues("kafka", "docs").Observe(0.3)
	}
	e = check()
	require.False(t, e.Signal.Exceeded, "p99 %g under the target", e.Signal.Score)
	require.Greater(t, e.Signal.Score, 0.0)

	for range 100 {
		fresh.WithLabelValues("kafka", "docs").Observe(4)
	}
	e = check()
	require.True(t, e.Signal.Exceeded, "p99 %g over the target", e.Signal.Score)
	require.True(t, e.Changed)
	require.Greater(t, e.Signal.Details["freshness_p99_seconds"], 2.0)

	// Nothing applied since, but the watermark of one lane is 4s old.
	wm := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ragsync_watermark_age_seconds"}, []string{"index", "source", "lane"})
	b.reg.MustRegister(wm)
	wm.WithLabelValues("docs", "kafka", "0").Set(0.5)
	wm.WithLabelValues("docs", "kafka", "1").Set(4)
	backlog = monitor.Backlog{}
	e = check()
	require.True(t, e.Signal.Exceeded, "the oldest lane's watermark is over the target")
	require.False(t, e.Changed, "still in alarm")
	require.Equal(t, 4.0, e.Signal.Score)
	require.Equal(t, 4.0, e.Signal.Details["watermark_age_seconds"])
	require.Zero(t, e.Signal.Details["freshness_p99_seconds"])
	require.Empty(t, e.Signal.Stage, "nothing pending")
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	require.NotContains(t, string(raw), `"stage"`, "absent when nothing is pending")

	wm.WithLabelValues("docs", "kafka", "1").Set(1)
	e = check()
	require.False(t, e.Signal.Exceeded)
	require.True(t, e.Changed, "back under the target")
	require.Equal(t, 1.0, e.Signal.Score)
}

// TestNoFreshnessSignalWithoutTarget: without freshness.target there is
// nothing to compare with, so no freshness event, whatever the numbers.
func TestNoFreshnessSignalWithoutTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wm := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_watermark_age_seconds"})
	b.reg.MustRegister(wm)
	wm.Set(600)
	m := freshnessMonitor(t, b, 0, func() monitor.Backlog { return monitor.Backlog{Pending: 1, OldestAge: time.Hour, Stage: "sink"} })
	st, err := m.Check(ctxT(t), monitor.CheckOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, st.Events)
	for _, e := range st.Events {
		require.NotEqual(t, monitor.TagFreshness, e.SemanticTag)
	}
}
