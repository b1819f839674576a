package sink

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	// editSimilarity is each applied update's similarity to the stored
	// version, 0–100, by method (ssdeep, shingle).
	editSimilarity *prometheus.HistogramVec
	// groupSize is the documents of each transaction that wrote several
	// (see groupCommit); groupFallbacks counts groups rolled back and
	// written document by document.
	groupSize      prometheus.Histogram
	groupFallbacks prometheus.Counter
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
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_sink_group_documents",
			Help:    "Documents written by each transaction that wrote several together (concurrent writes share a transaction; a document alone is not counted).",
			Buckets: []float64{2, 4, 8, 16, 32},
		}),
		groupFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragsync_sink_group_fallbacks_total",
			Help: "Transactions of several documents that rolled back (a concurrent writer, a deadlock) and were written again document by document.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.editSimilarity, err = register(reg, m.editSimilarity); err != nil {
		return nil, err
	}
	if m.groupSize, err = register(reg, m.groupSize); err != nil {
		return nil, err
	}
	if m.groupFallbacks, err = register(reg, m.groupFallbacks); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered already under
// its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return c, err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return c, err
	}
	return existing, nil
}
