package monitor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EventSchema is the version of the fused event's JSON schema (README
// "Fused monitor event"). Fields are only ever added under one version; a
// change of meaning bumps it. v3: exceeded is the alarm state and nothing
// else: drift's and query_drift's ks_p_bonferroni is a detail, never
// exceeded (v2: exceeded whenever its p-value was under the threshold,
// which on stationary data was nearly every check). v2: query_drift's
// psi_max, ks_p_bonferroni and centroid_cosine compare queries with the
// query reference (v1: with the chunk reference, now corpus_psi_max and
// corpus_centroid_cosine, never exceeded).
const EventSchema = "ragsync.monitor.event/v3"

// Semantic tags of events.
const (
	TagFidelity   = "fidelity"
	TagDrift      = "drift"
	TagQueryDrift = "query_drift"
	TagLag        = "lag"
	TagErrors     = "errors"
	TagFreshness  = "freshness"
	// TagBudget is the provider budget: exceeded when the fleet is
	// budget-bound rather than CPU- or Postgres-bound.
	TagBudget = "budget"
)

// Event is the fused monitor event: one signal with the metrics, warning
// log lines and trace ids around it.
type Event struct {
	Schema string    `json:"schema"`
	ID     string    `json:"id"`
	Time   time.Time `json:"time"`
	Index  string    `json:"index"`
	Model  string    `json:"model"`
	// ModelVersion is the model name the provider reported in its last
	// answer (it may differ from Model, e.g. a dated snapshot); empty when
	// the provider reports none.
	ModelVersion string `json:"model_version"`
	SemanticTag  string `json:"semantic_tag"`
	Signal       Signal `json:"signal"`
	// Changed says the signal's alarm state flipped at this check.
	Changed  bool            `json:"changed"`
	Metrics  MetricsSnapshot `json:"metrics"`
	Logs     []LogLine       `json:"logs"`
	TraceIDs []string        `json:"trace_ids"`
	// SampleProvenance is the provenance of the stored chunks the signal
	// re-embedded (fidelity's uniform_share_over_bound); absent on every
	// other signal.
	SampleProvenance *SampleProvenance `json:"sample_provenance,omitempty"`
}

// SampleProvenance says what wrote the stored chunks a fidelity check
// measured: which model versions embedded them and which chunker settings
// cut them, and the chunks measured past the cosine bound, each with the
// trace of the change that wrote it. Beside the event's model_version (what
// the provider answers now), it tells a model changed behind the same name
// from vectors embedded by a version that was already different. An
// unknown value is null: the chunk was written before ragsync recorded
// provenance.
type SampleProvenance struct {
	// ModelVersions and Chunkers count the measured chunks by their
	// recorded model version and chunker fingerprint, most first.
	ModelVersions []ProvenanceCount `json:"model_versions"`
	Chunkers      []ProvenanceCount `json:"chunkers"`
	// PastBound names the measured chunks past the cosine bound, farthest
	// first, at most five.
	PastBound []MeasuredChunk `json:"past_bound"`
}

// ProvenanceCount is how many measured chunks carry one value (null:
// unknown).
type ProvenanceCount struct {
	Value  *string `json:"value"`
	Chunks int     `json:"chunks"`
}

// MeasuredChunk is one measured chunk and its provenance (null: unknown).
type MeasuredChunk struct {
	ChunkID      int64   `json:"chunk_id"`
	Kind         string  `json:"kind"`
	Cosine       float64 `json:"cosine"`
	ModelVersion *string `json:"model_version"`
	Chunker      *string `json:"chunker"`
	TraceID      *string `json:"trace_id"`
}

// maxPastBound is how many chunks past the bound an event names.
const maxPastBound = 5

// sampleProvenance summarises the provenance of the measured chunks ms;
// nil when there are none.
func sampleProvenance(ms []Measurement, bound float64) *SampleProvenance {
	if len(ms) == 0 {
		return nil
	}
	sp := &SampleProvenance{PastBound: []MeasuredChunk{}}
	versions, chunkers := map[string]int{}, map[string]int{}
	var past []Measurement
	for _, m := range ms {
		versions[m.ModelVersion]++
		chunkers[m.Chunker]++
		if m.Cosine > bound {
			past = append(past, m)
		}
	}
	sp.ModelVersions, sp.Chunkers = counts(versions), counts(chunkers)
	slices.SortStableFunc(past, func(a, b Measurement) int { return cmp.Compare(b.Cosine, a.Cosine) })
	for _, m := range past[:min(len(past), maxPastBound)] {
		sp.PastBound = append(sp.PastBound, MeasuredChunk{ChunkID: m.ChunkID, Kind: m.Kind, Cosine: m.Cosine,
			ModelVersion: known(m.ModelVersion), Chunker: known(m.Chunker), TraceID: known(m.TraceID)})
	}
	return sp
}

// counts orders a tally most first, then by value (unknown last).
func counts(tally map[string]int) []ProvenanceCount {
	out := make([]ProvenanceCount, 0, len(tally))
	for v, n := range tally {
		out = append(out, ProvenanceCount{Value: known(v), Chunks: n})
	}
	slices.SortFunc(out, func(a, b ProvenanceCount) int {
		if c := cmp.Compare(b.Chunks, a.Chunks); c != 0 {
			return c
		}
		switch {
		case a.Value == nil:
			return 1
		case b.Value == nil:
			return -1
		}
		return cmp.Compare(*a.Value, *b.Value)
	})
	return out
}

// known is s, or nil (JSON null) for "": unknown.
func known(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Signal is one measured score against its threshold.
type Signal struct {
	Method    string  `json:"method"`
	Score     float64 `json:"score"`
	Threshold float64 `json:"threshold"`
	// Exceeded is the alarm state, and only that: for drift it follows the
	// hysteresis, so it can stay true while the score is back under the
	// threshold. Detail signals (KS, centroid distances, the corpus
	// distances of queries) carry their score and are never exceeded.
	Exceeded bool `json:"exceeded"`
	// Details carries the numbers behind the score (per-kind percentiles,
	// per-projection PSI, …).
	Details map[string]float64 `json:"details,omitempty"`
	// Stage is, on the freshness signal, where the oldest change fetched
	// and not yet applied is held: source, queued, provider or sink.
	// Absent when nothing is pending, and on every other signal.
	Stage string `json:"stage,omitempty"`
	// Storage is, on the fidelity signals of a halfvec or bit index, the
	// part of the distances the index's storage accounts for on its own
	// (see StorageError). Absent for a vector index and on every other
	// signal.
	Storage *StorageError `json:"storage,omitempty"`
	// Binds is, on the budget signal while exceeded, what binds the
	// fleet: requests_per_minute, tokens_per_minute, max_concurrency or
	// provider. Absent otherwise.
	Binds string `json:"binds,omitempty"`
	// Fix is, on the budget signal while exceeded, what to change: more
	// replicas cannot help a fleet its provider budget binds. Absent
	// otherwise.
	Fix string `json:"fix,omitempty"`
}

// MetricsSnapshot is the service's state at the check, from its own
// Prometheus registry. Rates are per second since the previous check.
type MetricsSnapshot struct {
	ThroughputPerSecond float64 `json:"throughput_per_second"`
	LagRecords          int64   `json:"lag_records"`
	LagSeconds          float64 `json:"lag_seconds"`
	DeadLetters         float64 `json:"dead_letters"`
	ErrorRate           float64 `json:"error_rate"`
	RetryRate           float64 `json:"retry_rate"`
	// FreshnessP50Seconds and FreshnessP99Seconds estimate, from
	// ragsync_pipeline_freshness_seconds, the time from a change's commit
	// in the source to its commit in the index, over the changes applied
	// since the previous check; 0 when none was.
	FreshnessP50Seconds float64 `json:"freshness_p50_seconds"`
	FreshnessP99Seconds float64 `json:"freshness_p99_seconds"`
}

func newEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Publisher sends events somewhere. Publish is called from the monitor's
// loop only.
type Publisher interface {
	Name() string
	Publish(ctx context.Context, evs []Event) error
}

// KafkaPublisher produces events to a topic, keyed by index and tag so one
// signal's events stay in order on one partition. It does not own the
// client.
type KafkaPublisher struct {
	Client *kgo.Client
	Topic  string
}

func (p KafkaPublisher) Name() string { return "kafka" }

func (p KafkaPublisher) Publish(ctx context.Context, evs []Event) error {
	recs := make([]*kgo.Record, 0, len(evs))
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: p.Topic, Key: []byte(e.Index + "/" + e.SemanticTag), Value: b})
	}
	if err := p.Client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce %d monitor events to %s: %w (check monitor.topic exists or topic auto-creation is on)", len(evs), p.Topic, err)
	}
	return nil
}

// RedisPublisher appends events to a stream trimmed to about MaxLen
// entries. It does not own the client.
type RedisPublisher struct {
	Client redis.UniversalClient
	Stream string
	MaxLen int64
}

func (p RedisPublisher) Name() string { return "redis" }

func (p RedisPublisher) Publish(ctx context.Context, evs []Event) error {
	pipe := p.Client.Pipeline()
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.Stream, MaxLen: p.MaxLen, Approx: true,
			Values: []any{"tag", e.SemanticTag, "exceeded", e.Signal.Exceeded, "event", b}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("append %d monitor events to %s: %w", len(evs), p.Stream, err)
	}
	return nil
}

// LogPublisher writes each event as one log line: warn when exceeded, info
// otherwise.
type LogPublisher struct{ Logger *slog.Logger }

func (p LogPublisher) Name() string { return "log" }

func (p LogPublisher) Publish(ctx context.Context, evs []Event) error {
	for _, e := range evs {
		lvl := slog.LevelInfo
		if e.Signal.Exceeded {
			lvl = slog.LevelWarn
		}
		p.Logger.Log(ctx, lvl, "monitor event", "semantic_tag", e.SemanticTag, "method", e.Signal.Method,
			"score", e.Signal.Score, "threshold", e.Signal.Threshold, "exceeded", e.Signal.Exceeded,
			"changed", e.Changed, "event_id", e.ID, "model", e.Model, "index", e.Index)
	}
	return nil
}

// publishAll sends evs to every publisher; one failing does not stop the
// others.
func (m *Monitor) publishAll(ctx context.Context, evs []Event) error {
	var errs []error
	for _, p := range m.pubs {
		if err := p.Publish(ctx, evs); err != nil {
			m.metrics.events.WithLabelValues(p.Name(), "failed").Add(float64(len(evs)))
			errs = append(errs, err)
			continue
		}
		m.metrics.events.WithLabelValues(p.Name(), "ok").Add(float64(len(evs)))
	}
	return errors.Join(errs...)
}
