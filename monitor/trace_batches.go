package monitor

import (
	"slices"
	"time"
)

type batchTrace struct {
	traceID string
	seconds float64
	at      time.Time
}

// maxWorst is how many slow or failed batches an event names.
const maxWorst = 5

// RecordBatch notes a batch's trace id and duration (a failed batch counts
// as infinitely slow), so events can name the worst recent ones.
func (m *Monitor) RecordBatch(traceID string, d time.Duration, failed bool) {
	if traceID == "" {
		return
	}
	s := d.Seconds()
	if failed {
		s = 1e18
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.worst = append(m.worst, batchTrace{traceID, s, m.deps.Now()})
	slices.SortFunc(m.worst, func(a, b batchTrace) int {
		if a.seconds > b.seconds {
			return -1
		}
		if a.seconds < b.seconds {
			return 1
		}
		return 0
	})
	if len(m.worst) > maxWorst {
		m.worst = m.worst[:maxWorst]
	}
}

// worstTraces returns the ids recorded in the last two intervals; the
// caller holds m.mu.
func (m *Monitor) worstTraces() []string {
	var out []string
	keep := m.worst[:0]
	for _, b := range m.worst {
		if m.deps.Now().Sub(b.at) <= 2*m.cfg.Interval {
			out = append(out, b.traceID)
			keep = append(keep, b)
		}
	}
	m.worst = keep
	return out
}
