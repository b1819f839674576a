package monitor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestSnapshotFreshnessSinceLastCheck: the fused event's freshness
// quantiles come from the changes applied since the previous check only.
func TestSnapshotFreshnessSinceLastCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ragsync_pipeline_freshness_seconds",
		Buckets: []float64{0.1, 0.2, 0.5, 1, 5},
	}, []string{"source", "index"})
	reg.MustRegister(h)
	s := &snapshotter{g: reg}
	now := time.Now()
	require.Zero(t, s.take(now).FreshnessP99Seconds, "nothing observed")

	for range 100 {
		h.WithLabelValues("kafka", "a").Observe(0.15)
	}
	snap := s.take(now.Add(time.Second))
	require.InDelta(t, 0.15, snap.FreshnessP50Seconds, 0.05)
	require.LessOrEqual(t, snap.FreshnessP99Seconds, 0.2)

	// Slow changes since: the quantiles follow them, not the history.
	for range 100 {
		h.WithLabelValues("kafka", "b").Observe(3)
	}
	snap = s.take(now.Add(2 * time.Second))
	require.Greater(t, snap.FreshnessP50Seconds, 1.0)
	require.LessOrEqual(t, snap.FreshnessP99Seconds, 5.0)
	require.Zero(t, s.take(now.Add(3*time.Second)).FreshnessP50Seconds, "nothing new since")
}
