// Package monitor watches an index for the ways it silently stops meaning
// what the model would say now, and fuses those signals with the service's
// metrics, logs and traces into one versioned event.
//
// Context fidelity: canary probes (probes.go, probes.txt) and a weighted
// sample of stored vectors (store.go) are re-embedded with the live embedder
// and compared with what the index holds (fidelity.go, distance.go); `ragsync repair` (repair.go)
// re-embeds the chunks measured past the bound. Drift (drift.go, stats.go):
// a persisted reference window and a sliding current window of chunk
// vectors, compared by centroid distance, PSI and two-sample KS on 1-D
// projections; the same for front-door queries (QueryTap). Lag (lag.go):
// Kafka lag in records and seconds, its 15-minute prediction and a
// recommended replica count. Every check publishes Events (event.go) to
// Kafka, a Redis Stream and the log, and sets Prometheus gauges.
//
// Canary baselines are taken only by serve's monitor (Deps.BaselineBy) or
// TakeBaselines, never by a read-only check; each records who took it.
//
// The monitor must not block the write path: it reads the index on its own
// schedule, through sink.MonitorState (it runs no SQL of its own; repair
// writes through sink.Store.RewriteVectors), spends at most
// monitor.max_tokens_per_hour on re-embedding, and a failed check is logged
// and retried at the next interval.
package monitor
