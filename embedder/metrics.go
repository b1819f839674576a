package embedder

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exposes o's counters on reg:
// ragsync_embedder_requests_total, ragsync_embedder_retries_total,
// ragsync_embedder_inputs_truncated_total (a warning: the tail of those
// inputs is not searchable), ragsync_embedder_batch_splits_total and
// ragsync_embedder_rate_limit_wait_seconds_total, and the provider
// budget's: ragsync_embedder_budget_requests_total{lane},
// ragsync_embedder_budget_tokens_total{lane},
// ragsync_embedder_budget_wait_seconds_total{lane},
// ragsync_embedder_throttled_total{lane} (429s),
// ragsync_embedder_budget_members and ragsync_embedder_budget_shared.
func RegisterMetrics(reg prometheus.Registerer, o *OpenAI) error {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	for _, c := range []prometheus.Collector{
		counter("ragsync_embedder_requests_total", "Requests sent to the embeddings API, retries included.",
			func() float64 { return float64(o.stats.requests.Load()) }),
		counter("ragsync_embedder_retries_total", "Requests that retried a failed one (429, 5xx, timeouts, resets).",
			func() float64 { return float64(o.stats.retries.Load()) }),
		counter("ragsync_embedder_inputs_truncated_total", "Inputs over embedder.max_input_tokens cut to it; their tail is not embedded.",
			func() float64 { return float64(o.stats.truncated.Load()) }),
		counter("ragsync_embedder_batch_splits_total", "Batches halved because the API rejected them as too large or answered them with a reply that does not match the request.",
			func() float64 { return float64(o.stats.splits.Load()) }),
		counter("ragsync_embedder_rate_limit_wait_seconds_total", "Time spent waiting for the provider budget: the requests/tokens per minute limits, the pause after a 429 and the bound on requests in flight (by lane: ragsync_embedder_budget_wait_seconds_total).",
			func() float64 { return float64(o.stats.limitWait.Load()) / 1e9 }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return registerBudgetMetrics(reg, o.budget)
}

// registerBudgetMetrics exposes the budget's counters by lane, and whether
// it is shared and by how many processes.
func registerBudgetMetrics(reg prometheus.Registerer, b *budget) error {
	var cs []prometheus.Collector
	for _, l := range lanes {
		c := &b.counters[l]
		labels := prometheus.Labels{"lane": l.String()}
		counter := func(name, help string, f func() float64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
		}
		cs = append(cs,
			counter("ragsync_embedder_budget_requests_total", "Requests the provider budget admitted, retries included, by lane.",
				func() float64 { return float64(c.requests.Load()) }),
			counter("ragsync_embedder_budget_tokens_total", "Tokens the provider budget admitted, by lane.",
				func() float64 { return float64(c.tokens.Load()) }),
			counter("ragsync_embedder_budget_wait_seconds_total", "Time requests waited for the provider budget (rate limits, the fleet's pause after a 429, requests in flight), by lane.",
				func() float64 { return float64(c.wait.Load()) / 1e9 }),
			counter("ragsync_embedder_throttled_total", "Requests the provider answered with 429, by lane.",
				func() float64 { return float64(c.throttled.Load()) }))
	}
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ragsync_embedder_budget_members", Help: "Processes last seen sharing the provider key's budget (1 without Redis)."},
			func() float64 { return float64(max(b.members.Load(), 1)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ragsync_embedder_budget_shared", Help: "1 while the provider key's limits are shared through Redis, 0 when per process (no Redis configured, or Redis unreachable)."},
			func() float64 {
				if b.mode() == BudgetShared {
					return 1
				}
				return 0
			}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// RegisterCoalescerMetrics exposes co's counters on reg:
// ragsync_embedder_coalesced_calls_total (calls, one per document that
// needed vectors), ragsync_embedder_coalesced_requests_total and
// ragsync_embedder_coalesced_inputs_total; inputs ÷ requests is how full
// requests leave. The gauges ragsync_embedder_coalesced_requests_in_flight,
// _requests_allowed and _latency_seconds show the requests in flight
// against how many the provider's observed latency allows.
func RegisterCoalescerMetrics(reg prometheus.Registerer, co *Coalescer) error {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	for _, c := range []prometheus.Collector{
		counter("ragsync_embedder_coalesced_calls_total", "Embed calls (documents needing vectors) that queued texts for shared requests.",
			func() float64 { return float64(co.calls.Load()) }),
		counter("ragsync_embedder_coalesced_requests_total", "Shared requests sent to the embedding client, resends of narrowed failures included.",
			func() float64 { return float64(co.requests.Load()) }),
		counter("ragsync_embedder_coalesced_inputs_total", "Texts carried by shared requests.",
			func() float64 { return float64(co.inputs.Load()) }),
		counter("ragsync_embedder_coalesced_shared_texts_total", "Texts not sent because the same text was already in the request for another document.",
			func() float64 { return float64(co.shared.Load()) }),
		gauge("ragsync_embedder_coalesced_requests_in_flight", "Shared requests in flight, the one being gathered included.",
			func() float64 { return float64(co.Stats().InFlight) }),
		gauge("ragsync_embedder_coalesced_requests_allowed", "Shared requests allowed in flight while full requests wait: the provider's observed latency ÷ embedder.linger, at least 4, within the rate limits and embedder.max_requests_in_flight.",
			func() float64 { return float64(co.Stats().Limit) }),
		gauge("ragsync_embedder_coalesced_latency_seconds", "Moving average of the provider's answer time for shared requests (without rate-limit waits and retries).",
			func() float64 { return co.Stats().Latency.Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
