package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/sink"
)

type metrics struct {
	changes   *prometheus.CounterVec // op, outcome
	chunks    *prometheus.CounterVec // result: embedded, cached, unchanged, moved, removed
	txSeconds prometheus.Histogram   // sink transaction duration, without the wait for a connection
	connWait  prometheus.Histogram   // wait for a pooled connection of one document's sink call
	retries   *prometheus.CounterVec // stage, cause
	batchSecs prometheus.Histogram   // batch processing duration
	lag       *prometheus.GaugeVec   // seconds between the change's source timestamp and its apply
	// missingColumns counts rows lacking template columns, by table.
	missingColumns *prometheus.CounterVec
	nulStripped    prometheus.Counter     // rows stored and embedded without their NUL characters
	tooLarge       prometheus.Counter     // documents over max_document_bytes, dead-lettered
	shadowWrites   *prometheus.CounterVec // outcome: applied, retried, failed (see shadow.go)
	// freshness is the time from a change's commit in the source to its
	// commit in the index.
	freshness    prometheus.Observer
	backpressure prometheus.Counter // seconds fetching waited for room
}

// newMetrics registers the pipeline's metrics; inFlight reports the age of
// the batch in flight for ragsync_pipeline_batch_in_flight_seconds.
// and dlqRatio the dead-letter guard's window share for
// ragsync_pipeline_dead_letter_ratio.
func newMetrics(cfg Config, inFlight, dlqRatio func() float64, work func() (int64, int)) *metrics {
	reg := cfg.Registerer
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
			Help:    "Duration of one document's sink call, without the wait for a pooled connection (ragsync_sink_conn_wait_seconds).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		connWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_sink_conn_wait_seconds",
			Help:    "Time one document's sink call waited for pooled Postgres connections; a growing share means the pool (pool_max_conns in postgres.url) is too small for the work.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_pipeline_retries_total",
			Help: "Retries by stage (apply, ack, dead_letter) and cause (transient: a dependency is down; unclassified: bounded, then dead-lettered).",
		}, []string{"stage", "cause"}),
		batchSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_pipeline_batch_duration_seconds",
			Help:    "Time from fetching a batch to acknowledging it (it waits for every batch fetched before it in its lane).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_pipeline_lag_seconds",
			Help: "Seconds between the last applied change's source timestamp and its apply, by table.",
		}, []string{"table"}),
	}
	inFlightAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragsync_pipeline_batch_in_flight_seconds",
		Help: "Age of the oldest batch not yet acknowledged, 0 when idle; a value that keeps growing is a stall (see /readyz).",
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
	freshness := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ragsync_pipeline_freshness_seconds",
		Help:    "Time from a change's commit in the source (pgoutput commit timestamp, Debezium source.ts_ms) to the commit of the document's chunks and vectors in the index, by source and index; snapshot reads are left out.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300},
	}, []string{"source", "index"})
	m.freshness = freshness.WithLabelValues(cfg.SourceName, cfg.IndexName)
	m.backpressure = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ragsync_pipeline_backpressure_seconds_total",
		Help: "Seconds fetching waited because the work in flight reached pipeline.max_in_flight_bytes or pipeline.max_in_flight_documents.",
	})
	inFlightBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragsync_pipeline_in_flight_bytes",
		Help: "Estimated memory held by the work in flight: the bytes of the changes handed over and not yet applied, plus a fixed cost per document being applied (bounded by pipeline.max_in_flight_bytes).",
	}, func() float64 { b, _ := work(); return float64(b) })
	inFlightDocs := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragsync_pipeline_in_flight_documents",
		Help: "Documents with changes fetched and not yet applied (bounded by pipeline.max_in_flight_documents).",
	}, func() float64 { _, d := work(); return float64(d) })
	if reg != nil {
		reg.MustRegister(m.shadowWrites, freshness, m.backpressure, inFlightBytes, inFlightDocs)
		reg.MustRegister(m.changes, m.chunks, m.txSeconds, m.connWait, m.retries, m.batchSecs, m.lag, inFlightAge, dlqShare, m.missingColumns, m.nulStripped, m.tooLarge)
	}
	return m
}

// observeTx records a sink call that began at start: the wait for
// connections apart from the rest.
func (m *metrics) observeTx(start time.Time, wait *sink.ConnWait) {
	w := wait.Duration()
	m.connWait.Observe(w.Seconds())
	m.txSeconds.Observe(max(0, time.Since(start)-w).Seconds())
}
