package monitor

import (
	"context"
	"math"
	"strconv"
	"time"
)

// LagSource reports the records behind per topic and partition for the
// partitions this member is assigned (Lag of cdc/kafka's Source), and the total
// partition count of the topics it consumes.
type LagSource interface {
	Lag(ctx context.Context) (map[string]map[int32]int64, error)
	Partitions(ctx context.Context) (int, error)
}

// LagPredictHorizon is how far ahead the lag is predicted.
const LagPredictHorizon = 15 * time.Minute

// lagWindow is how much history the slope is fitted on.
const lagWindow = 10 * time.Minute

type lagPoint struct {
	at    time.Time
	total float64
}

// LagStatus is the lag at one check.
type LagStatus struct {
	Partitions map[string]map[int32]PartitionLag `json:"partitions"`
	// TotalRecords over the assigned partitions.
	TotalRecords int64 `json:"total_records"`
	// MaxSeconds is the worst partition's lag in seconds.
	MaxSeconds float64 `json:"max_seconds"`
	// SlopePerSecond is the fitted growth of the total lag.
	SlopePerSecond float64 `json:"slope_per_second"`
	// Predicted is the total lag expected in LagPredictHorizon.
	Predicted float64 `json:"predicted_records"`
	// Replicas is the current member count estimated from the share of
	// partitions assigned here; Recommended what would drain the predicted
	// backlog within monitor.drain_target, in [1, partition count].
	Replicas, Recommended, PartitionCount int
	// CappedBy says why Recommended was held at Replicas ("budget: …"
	// while the fleet is budget-bound), and Uncapped is what the lag
	// alone asked for; both empty when nothing capped it.
	CappedBy string `json:"capped_by,omitempty"`
	Uncapped int    `json:"uncapped,omitempty"`
}

// PartitionLag is one partition's lag.
type PartitionLag struct {
	Records int64   `json:"records"`
	Seconds float64 `json:"seconds"`
}

// lagTracker keeps recent totals to fit the slope.
type lagTracker struct {
	points []lagPoint
}

// observe records lag at t with this member's throughput (records per
// second, all partitions) and returns the status. Seconds per partition is
// records over the partition's share of the throughput: an estimate, since
// Kafka does not say how old the oldest unconsumed record is without
// reading it.
func (l *lagTracker) observe(t time.Time, lag map[string]map[int32]int64, throughput float64, partitions, maxReplicas int, drain time.Duration) LagStatus {
	st := LagStatus{Partitions: map[string]map[int32]PartitionLag{}, PartitionCount: partitions}
	assigned := 0
	for _, ps := range lag {
		assigned += len(ps)
	}
	perPart := throughput / math.Max(float64(assigned), 1)
	for topic, ps := range lag {
		st.Partitions[topic] = map[int32]PartitionLag{}
		for p, n := range ps {
			pl := PartitionLag{Records: n}
			switch {
			case n == 0:
			case perPart > 0:
				pl.Seconds = float64(n) / perPart
			default:
				// Nothing consumed since the last check: the backlog does
				// not drain at all. Report the horizon as a floor.
				pl.Seconds = LagPredictHorizon.Seconds()
			}
			st.Partitions[topic][p] = pl
			st.TotalRecords += n
			st.MaxSeconds = math.Max(st.MaxSeconds, pl.Seconds)
		}
	}
	l.points = append(l.points, lagPoint{t, float64(st.TotalRecords)})
	for len(l.points) > 2 && t.Sub(l.points[0].at) > lagWindow {
		l.points = l.points[1:]
	}
	st.SlopePerSecond = slope(l.points)
	st.Predicted = math.Max(0, float64(st.TotalRecords)+st.SlopePerSecond*LagPredictHorizon.Seconds())

	st.Replicas = 1
	if assigned > 0 && partitions > 0 {
		st.Replicas = max(1, int(math.Round(float64(partitions)/float64(assigned))))
	}
	st.Recommended = st.Replicas
	if throughput > 0 {
		// Capacity needed: what arrives (consumed + growth of the lag) plus
		// draining the predicted backlog within the target, in units of
		// what one replica consumes now.
		perReplica := throughput / float64(st.Replicas)
		inflow := throughput + st.SlopePerSecond*float64(st.Replicas)
		need := inflow + st.Predicted*float64(st.Replicas)/drain.Seconds()
		st.Recommended = int(math.Ceil(need / perReplica))
	}
	upper := max(partitions, 1)
	if maxReplicas > 0 {
		upper = min(upper, maxReplicas)
	}
	st.Recommended = min(max(st.Recommended, 1), upper)
	return st
}

// slope is the least-squares slope of total over time, per second.
func slope(ps []lagPoint) float64 {
	if len(ps) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	t0 := ps[0].at
	for _, p := range ps {
		x := p.at.Sub(t0).Seconds()
		sx += x
		sy += p.total
		sxx += x * x
		sxy += x * p.total
	}
	n := float64(len(ps))
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

func (m *Monitor) setLagMetrics(st LagStatus) {
	m.metrics.lagRec.Reset()
	m.metrics.lagSec.Reset()
	for topic, ps := range st.Partitions {
		for p, pl := range ps {
			part := strconv.Itoa(int(p))
			m.metrics.lagRec.WithLabelValues(topic, part).Set(float64(pl.Records))
			m.metrics.lagSec.WithLabelValues(topic, part).Set(pl.Seconds)
		}
	}
	m.metrics.lagPred.Set(st.Predicted)
	m.metrics.replicas.Set(float64(st.Recommended))
}
