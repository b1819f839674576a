package monitor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// snapshotter turns the service's registry into MetricsSnapshot, with
// rates since the previous call.
type snapshotter struct {
	g      prometheus.Gatherer
	prev   map[string]float64
	prevAt time.Time
}

// sums adds up every series of the counters the snapshot uses.
func (s *snapshotter) sums() map[string]float64 {
	out := map[string]float64{}
	if s.g == nil {
		return out
	}
	mfs, err := s.g.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "ragsync_pipeline_changes_total":
				out["changes"] += m.GetCounter().GetValue()
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "dead_lettered" {
						out["dead_letters"] += m.GetCounter().GetValue()
					}
				}
			case "ragsync_pipeline_retries_total":
				out["retries"] += m.GetCounter().GetValue()
			case "ragsync_pipeline_lag_seconds":
				out["lag_seconds"] = max(out["lag_seconds"], m.GetGauge().GetValue())
			}
		}
	}
	return out
}

func (s *snapshotter) take(now time.Time) MetricsSnapshot {
	cur := s.sums()
	snap := MetricsSnapshot{DeadLetters: cur["dead_letters"], LagSeconds: cur["lag_seconds"]}
	if s.prev != nil {
		if dt := now.Sub(s.prevAt).Seconds(); dt > 0 {
			rate := func(k string) float64 { return max(0, cur[k]-s.prev[k]) / dt }
			snap.ThroughputPerSecond = rate("changes")
			snap.ErrorRate = rate("dead_letters")
			snap.RetryRate = rate("retries")
		}
	}
	s.prev, s.prevAt = cur, now
	return snap
}
