package fallback

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a request (label of ragsync_frontdoor_requests_total and path
// of the latency histogram).
const (
	outcomeHit         = "hit"
	outcomeMiss        = "miss"
	outcomeNegativeHit = "negative_hit"
	outcomeBloomReject = "bloom_reject"
	outcomeCoalesced   = "coalesced"
	outcomeDegraded    = "degraded"
	outcomeError       = "error"
	outcomeInvalid     = "invalid"
	outcomeRetry       = "retry"     // not answered yet: left pending for another delivery
	outcomeDuplicate   = "duplicate" // request id already answered
	outcomeNotYet      = "not_yet"   // the watermark did not pass the request's after in time
)

// Outcomes of a wait for the watermark (ragsync_frontdoor_after_waits_total).
const (
	afterPassed  = "passed"  // the watermark passed: answered
	afterNotYet  = "not_yet" // timed out: answered not_yet
	afterBusy    = "busy"    // max_after_waiters already waiting: answered not_yet at once
	afterStopped = "stopped" // the front door stopped: left pending for another
)

type metrics struct {
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	breakerState prometheus.Gauge
	pending      prometheus.Gauge
	dlqEntries   prometheus.Gauge
	deadLetters  prometheus.Counter
	reclaimed    prometheus.Counter
	embeddings   *prometheus.CounterVec
	afterWaits   *prometheus.CounterVec
	afterWait    *prometheus.HistogramVec
}

// newMetrics registers the front door's metrics on reg; nil reg means a
// private registry (metrics are kept but not exported).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_frontdoor_requests_total",
			Help: "Front door requests by outcome (hit, miss, negative_hit, bloom_reject, coalesced, degraded, error, invalid, retry, duplicate, not_yet).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragsync_frontdoor_request_duration_seconds",
			Help:    "Time from taking a request off the stream to sending its reply, by path (outcome).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"path"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_frontdoor_breaker_state",
			Help: "Circuit breaker around embed+search: 0 closed, 1 half-open, 2 open.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_frontdoor_pending_entries",
			Help: "Requests delivered to a worker and not yet acknowledged (the group's pending entries list).",
		}),
		dlqEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_frontdoor_dlq_entries",
			Help: "Entries in the dead-letter stream (answered or not), i.e. the DLQ depth.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragsync_frontdoor_dead_letters_total",
			Help: "Requests moved to the dead-letter stream after max_deliveries failed tries.",
		}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragsync_frontdoor_reclaimed_total",
			Help: "Pending requests reclaimed with XAUTOCLAIM for another try.",
		}),
		embeddings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_frontdoor_query_embeddings_total",
			Help: "Query embeddings by source (cache or computed).",
		}, []string{"source"}),
	}
	m.afterWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ragsync_frontdoor_after_waits_total",
		Help: "Requests with after by how their wait for the watermark ended (passed, not_yet, busy, stopped).",
	}, []string{"outcome"})
	m.afterWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ragsync_frontdoor_after_wait_seconds",
		Help:    "How long requests with after waited for the watermark, by outcome (passed, not_yet).",
		Buckets: []float64{0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	}, []string{"outcome"})
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.breakerState, m.pending, m.dlqEntries, m.deadLetters, m.reclaimed, m.embeddings, m.afterWaits, m.afterWait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
