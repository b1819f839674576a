package monitor

import (
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// snapshotter turns the service's registry into MetricsSnapshot, with
// rates since the previous call.
type snapshotter struct {
	g      prometheus.Gatherer
	prev   map[string]float64
	prevAt time.Time
	// prevFresh is the freshness histogram's cumulative count per upper
	// bound at the previous call, summed over sources and indexes.
	prevFresh map[float64]float64
	// watermarkAge is, at the last call, the largest
	// ragsync_watermark_age_seconds over its series; 0 when the metric is
	// absent (unknown).
	watermarkAge float64
}

// sums adds up every series of the counters the snapshot uses, and the
// freshness histogram's buckets.
func (s *snapshotter) sums() (map[string]float64, map[float64]float64) {
	out := map[string]float64{}
	fresh := map[float64]float64{}
	if s.g == nil {
		return out, fresh
	}
	mfs, err := s.g.Gather()
	if err != nil {
		return out, fresh
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "ragsync_pipeline_freshness_seconds":
				for _, b := range m.GetHistogram().GetBucket() {
					fresh[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
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
			case "ragsync_watermark_age_seconds":
				// The oldest watermark over indexes, sources and lanes: the
				// index is as fresh as its most behind lane.
				out["watermark_age"] = max(out["watermark_age"], m.GetGauge().GetValue())
			}
		}
	}
	return out, fresh
}

func (s *snapshotter) take(now time.Time) MetricsSnapshot {
	cur, fresh := s.sums()
	s.watermarkAge = cur["watermark_age"]
	snap := MetricsSnapshot{DeadLetters: cur["dead_letters"], LagSeconds: cur["lag_seconds"]}
	snap.FreshnessP50Seconds = freshnessQuantile(0.5, fresh, s.prevFresh)
	snap.FreshnessP99Seconds = freshnessQuantile(0.99, fresh, s.prevFresh)
	s.prevFresh = fresh
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

// freshnessQuantile estimates the q-quantile of the freshness observed
// since the previous check from the histogram's bucket counts (cur minus
// prev), interpolating inside the bucket as Prometheus's
// histogram_quantile does; 0 when nothing was observed.
func freshnessQuantile(q float64, cur, prev map[float64]float64) float64 {
	bounds := make([]float64, 0, len(cur))
	for ub := range cur {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := cur[bounds[len(bounds)-1]] - prev[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, ub := range bounds {
		n := cur[ub] - prev[ub]
		if n >= rank {
			if math.IsInf(ub, 1) {
				return lower
			}
			if n == below {
				return ub
			}
			return lower + (ub-lower)*(rank-below)/(n-below)
		}
		lower, below = ub, n
	}
	return lower
}
