package monitor

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	score     *prometheus.GaugeVec // semantic_tag, method: every score
	threshold *prometheus.GaugeVec // semantic_tag, method
	exceeded  *prometheus.GaugeVec // semantic_tag, method: 0/1
	fidelity  *prometheus.GaugeVec // kind, stat (p50, p99, share_over_bound)
	tokens    *prometheus.CounterVec
	budget    prometheus.GaugeFunc
	checks    *prometheus.CounterVec // outcome
	events    *prometheus.CounterVec // sink, outcome
	lagRec    *prometheus.GaugeVec   // topic, partition
	lagSec    *prometheus.GaugeVec   // topic, partition
	lagPred   prometheus.Gauge
	replicas  prometheus.Gauge
	// budgetBound is 1 while the last check found the fleet bound by its
	// provider budget.
	budgetBound prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, budgetLeft func() float64) (*metrics, error) {
	m := &metrics{
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_score",
			Help: "The last score of each monitor signal (semantic_tag: fidelity, drift, query_drift, lag; method as in the fused event).",
		}, []string{"semantic_tag", "method"}),
		threshold: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_threshold",
			Help: "The threshold each monitor signal's score is compared with.",
		}, []string{"semantic_tag", "method"}),
		exceeded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_alarm",
			Help: "1 while a monitor signal is in alarm (after hysteresis), else 0.",
		}, []string{"semantic_tag", "method"}),
		fidelity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_fidelity_cosine_distance",
			Help: "Cosine distance between stored vectors and fresh embeddings of their texts at the last check, by kind (canary, reused, cached, uniform) and stat (p50, p99, share_over_bound is a ratio).",
		}, []string{"kind", "stat"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_monitor_tokens_total",
			Help: "Tokens the monitor sent to the embedding API, by purpose (canary, sample, repair).",
		}, []string{"purpose"}),
		budget: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragsync_monitor_token_budget_tokens",
			Help: "Tokens the sampler may still spend now under monitor.max_tokens_per_hour.",
		}, budgetLeft),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_monitor_checks_total",
			Help: "Monitor checks by outcome (ok, failed).",
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragsync_monitor_events_total",
			Help: "Fused events published, by sink (kafka, redis, log) and outcome (ok, failed).",
		}, []string{"sink", "outcome"}),
		lagRec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_lag_records",
			Help: "Kafka records behind per assigned partition at the last check.",
		}, []string{"topic", "partition"}),
		lagSec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ragsync_monitor_lag_seconds",
			Help: "Seconds the partition's backlog takes at its recent consumption rate.",
		}, []string{"topic", "partition"}),
		lagPred: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_monitor_lag_predicted_records",
			Help: "Total lag of the assigned partitions predicted 15 minutes ahead from its recent slope.",
		}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_monitor_recommended_replicas",
			Help: "Replicas that would drain the predicted backlog within monitor.drain_target, bounded by the partition count, and held at the current count while the fleet is budget-bound.",
		}),
		budgetBound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ragsync_monitor_budget_bound",
			Help: "1 when the last check found the fleet bound by its provider budget (the live lane waited for it at least monitor.budget_bound_share of the window, or was throttled), else 0.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.score, m.threshold, m.exceeded, m.fidelity, m.tokens, m.budget,
			m.checks, m.events, m.lagRec, m.lagSec, m.lagPred, m.replicas, m.budgetBound} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
