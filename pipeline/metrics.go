package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	changes   *prometheus.CounterVec // op, outcome
	chunks    *prometheus.CounterVec // result: embedded, cached, unchanged, moved, removed
	txSeconds prometheus.Histogram   // sink transaction duration
	retries   *prometheus.CounterVec // stage, cause
	batchSecs prometheus.Histogram   // batch processing duration
	lag       *prometheus.GaugeVec   // seconds between the change's source timestamp and its apply
	// missingColumns counts rows lacking template columns, by table.
	missingColumns *prometheus.CounterVec
	nulStripped    prometheus.Counter     // rows stored and embedded without their NUL characters
	tooLarge       prometheus.Counter     // documents over max_document_bytes, dead-lettered
	shadowWrites   *prometheus.CounterVec // outcome: applied, retried, failed (see shadow.go)
}

// newMetrics registers the pipeline's metrics; inFlight reports the age of
// the batch in flight for ragsync_pipeline_batch_in_flight_seconds.
// and dlqRatio the dead-letter guard's window share for
// ragsync_pipeline_dead_letter_ratio.
func newMetrics(reg prometheus.Registerer, inFlight, dlqRatio func() float64) *metrics {
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_pipeline_changes_total",
			Help: "Change events by Debezium op and outcome (applied, stale, duplicate, skipped, dead_lettered).",
		}, []string{"op", "outcome"}),
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_pipeline_chunks_total",
			Help: "Chunks by result: embedded (sent to the API), cached (vector reused by content hash), unchanged, moved, removed.",
		}, []string{"result"}),
		txSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_sink_tx_duration_seconds",
			Help:    "Duration of one document's sink transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_pipeline_retries_total",
			Help: "Retries by stage (apply, ack, dead_letter) and cause (transient: a dependency is down; unclassified: bounded, then dead-lettered).",
		}, []string{"stage", "cause"}),
		batchSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_pipeline_batch_duration_seconds",
			Help:    "Time from fetching a batch to acknowledging it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_pipeline_lag_seconds",
			Help: "Seconds between the last applied change's source timestamp and its apply, by table.",
		}, []string{"table"}),
	}
	inFlightAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragsync_pipeline_batch_in_flight_seconds",
		Help: "Age of the batch being applied, 0 when idle; a value that keeps growing is a stall (see /readyz).",
	}, inFlight)
	m.missingColumns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ragsync_pipeline_template_missing_columns_total",
		Help: "Rows lacking a column their table's tables[].text template names, by table (warned once per table).",
	}, []string{"table"})
	m.nulStripped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ragsync_pipeline_nul_stripped_total",
		Help: "Rows whose NUL (U+0000) characters were removed: Postgres text and jsonb cannot hold them.",
	})
	m.tooLarge = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ragsync_pipeline_documents_too_large_total",
		Help: "Documents whose text is over pipeline.max_document_bytes, dead-lettered.",
	})
	dlqShare := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragsync_pipeline_dead_letter_ratio",
		Help: "Share of the last pipeline.dead_letter_window messages that were dead-lettered; past pipeline.dead_letter_max_ratio the pipeline stops.",
	}, dlqRatio)
	m.shadowWrites = newShadowMetric()
	if reg != nil {
		reg.MustRegister(m.shadowWrites)
		reg.MustRegister(m.changes, m.chunks, m.txSeconds, m.retries, m.batchSecs, m.lag, inFlightAge, dlqShare, m.missingColumns, m.nulStripped, m.tooLarge)
	}
	return m
}
