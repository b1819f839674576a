package sink

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	// editSimilarity is each applied update's similarity to the stored
	// version, 0–100, by method (ssdeep, shingle).
	editSimilarity *prometheus.HistogramVec
}

// newMetrics registers the sink's metrics with reg (nil: none). Two Stores
// on one registry share the collectors instead of failing.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		editSimilarity: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragsync_sink_edit_similarity",
			Help:    "Similarity (0-100) of each applied document update to the version it replaced, by method: ssdeep, or shingle for texts under ssdeep's 4096-byte minimum.",
			Buckets: []float64{10, 25, 50, 75, 90, 95, 98, 99, 100},
		}, []string{"method"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.editSimilarity); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		h, ok := are.ExistingCollector.(*prometheus.HistogramVec)
		if !ok {
			return nil, err
		}
		m.editSimilarity = h
	}
	return m, nil
}
