package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// Embedder is the live embedder the monitor re-embeds with.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
	Dimensions() int
}

// Deps are what a Monitor reads and writes. Pool, Schema, Index and
// Embedder are required; the rest is optional.
type Deps struct {
	Pool     *pgxpool.Pool
	Schema   string
	Index    string
	Embedder Embedder
	// Publishers receive every check's events (Kafka, Redis, log).
	Publishers []Publisher
	// Logs supplies the recent warnings events carry.
	Logs *LogRing
	// Gatherer is serve's registry, for the metrics snapshot.
	Gatherer prometheus.Gatherer
	// Lag is the Kafka source, when there is one.
	Lag LagSource
	// ModelVersion returns the model name the provider last reported.
	ModelVersion func() string
	// Now defaults to time.Now.
	Now func() time.Time
	// BaselineBy, when set, lets Check take the canary baselines the index
	// does not have yet, recorded as taken by this command ("serve"). Empty
	// (every other command): Check never takes one, and canaries without a
	// baseline are not measured (TakeBaselines takes them explicitly).
	BaselineBy string
	// Debt, when set, is the index's reuse debt, checked against
	// DebtWindow (the reuse repayment window; 0 means 5m).
	Debt       DebtSource
	DebtWindow time.Duration
	// Redact masks secrets in the text events carry (their log lines
	// quote errors, which may quote an API key or a connection string):
	// events leave the process on Kafka and Redis. nil keeps the text.
	Redact func(string) string
	// FreshnessTarget is freshness.target: with it, each check emits the
	// freshness signal against it. 0: no target, no signal.
	FreshnessTarget time.Duration
	// Backlog reports the pipeline's backlog for the freshness signal's
	// details. Nil reports none.
	Backlog func() Backlog
	// VectorType is the index's type (sink.IndexInfo.Type): a canary
	// baseline is compared as the index stores it, and the fidelity
	// signals of a halfvec or bit index carry the storage's own error
	// (Signal.Storage). "" is vector.
	VectorType sink.VectorType
	// Budget reports the embedding client's provider budget: with it,
	// each check emits the budget signal and caps the replica
	// recommendation while the fleet is budget-bound. Nil: no signal.
	Budget func() ProviderBudget
}

// Monitor runs the checks of one index. Its methods are safe for
// concurrent use; Run is called once.
type Monitor struct {
	cfg     Config
	deps    Deps
	st      *store
	emb     Embedder
	pubs    []Publisher
	logger  *slog.Logger
	metrics *metrics
	budget  *budget
	snap    snapshotter
	lag     lagTracker
	pbudget budgetTracker
	rng     *rand.Rand

	// drift compares chunks with the chunk reference; queryRef queries
	// with the query reference; query queries with the chunk reference
	// (the corpus distance, reported only).
	drift, queryRef, query *Drift
	worst                  worstTraces // own lock: written by the pipeline's workers

	mu       sync.Mutex // guards the fields below and serialises checks
	last     Status
	alarms   map[string]bool // tag/method → state at the previous check
	pinnedAt time.Time       // reference pin the windows were loaded at
	qPinned  time.Time       // query reference pin, likewise
	lastID   int64           // chunks read into the windows up to this id
	baseline bool            // canary baselines are stored
	// lastBaselines describes the baselines the last check read.
	lastBaselines Baselines
	// saved identifies, per window, the vectors last written, so a save
	// rewrites only the windows that changed; absent means unknown.
	saved map[string]string
}

// Status is the result of one check.
type Status struct {
	Time     time.Time   `json:"time"`
	Events   []Event     `json:"events"`
	Fidelity []Aggregate `json:"fidelity"`
	// Sample counts the stored-vector sample: asked, measured, and why any
	// were not; nil when the check took none.
	Sample *SampleCount `json:"sample,omitempty"`
	Drift  DriftResult  `json:"drift"`
	// Query compares recent front-door queries with the query reference.
	Query DriftResult `json:"query_drift"`
	// QueryCorpus compares them with the chunk reference: how far users
	// ask from what the index holds. Queries and chunks differ by nature,
	// so it is reported, never alarmed on.
	QueryCorpus DriftResult `json:"query_corpus"`
	Lag         *LagStatus  `json:"lag,omitempty"`
	// Baselines says who took the canary baselines the check compared
	// with, and when.
	Baselines Baselines `json:"canary_baselines"`
	// Debt is the reuse debt, when the monitor knows the index's store.
	Debt *DebtStatus `json:"debt,omitempty"`
	// Budget is the provider budget over the window since the previous
	// check; nil without one, and at the first check.
	Budget *BudgetStatus `json:"budget,omitempty"`
	// Breach is true when any signal is in alarm.
	Breach bool `json:"breach"`
}

// New builds the monitor and loads its persisted windows. With
// Deps.BaselineBy set (serve), the canary baselines the index does not
// have yet are stored by the first check (the first time the monitor meets
// an index, i.e. at its creation when the monitor is on from the start);
// an embedding API that is down then only delays them to the next check,
// it never stops serve.
func New(ctx context.Context, cfg Config, d Deps) (*Monitor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Pool == nil || d.Embedder == nil || d.Index == "" {
		return nil, errors.New("monitor: Pool, Embedder and Index are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Schema == "" {
		d.Schema = "ragsync"
	}
	m := &Monitor{
		cfg: cfg, deps: d, emb: d.Embedder, pubs: d.Publishers,
		logger: cfg.Logger.With("stage", "monitor", "index", d.Index),
		st:     newStore(d.Pool, d.Schema, d.Index, d.Embedder.Model(), d.Embedder.Dimensions()),
		budget: newBudget(cfg.MaxTokensPerHour, d.Now),
		snap:   snapshotter{g: d.Gatherer},
		rng:    rand.New(rand.NewPCG(uint64(d.Now().UnixNano()), 0x6d6f6e)),
		drift:  NewDrift(cfg.ReferenceSize, cfg.WindowSize, cfg.Components),
		alarms: map[string]bool{},
		saved:  map[string]string{},
	}
	m.query = NewQueryDrift(m.drift, cfg.WindowSize)
	m.queryRef = NewDrift(cfg.QueryReferenceSize, cfg.QueryReferenceSize, cfg.Components)
	var err error
	if m.metrics, err = newMetrics(cfg.Registerer, m.budget.remaining); err != nil {
		return nil, fmt.Errorf("monitor metrics: %w", err)
	}
	// The windows are read at start-up, when a restarting Postgres or a
	// terminated backend must not stop serve (the rule for every
	// start-up read); loading them again is harmless.
	if err := migrations.RetryInterrupted(ctx, m.logger, "loading the drift windows", func() error { return m.loadWindows(ctx) }); err != nil {
		return nil, err
	}
	return m, nil
}

// Run checks every monitor.interval until ctx ends, and returns nil then.
// A failed check is logged and counted, never fatal: the monitor must not
// stop the service it watches.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := m.Check(ctx, CheckOptions{}); err != nil && ctx.Err() == nil {
			m.logger.WarnContext(ctx, "monitor check failed; will retry at the next interval", "error", err)
		}
		select {
		case <-ctx.Done():
			// Keep what the windows saw since the last check.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := m.saveWindows(sctx); err != nil {
				m.logger.Warn("could not save the drift windows at shutdown", "error", err)
			}
			return nil
		case <-t.C:
		}
	}
}

// CheckOptions change one check.
type CheckOptions struct {
	// SampleSize overrides monitor.sample_size (ragsync fidelity check
	// --sample N); negative turns sampling off.
	SampleSize int
	// NoPublish computes and returns the events without publishing them.
	NoPublish bool
	// NoSave leaves the persisted windows alone (read-only status).
	NoSave bool
}

// Last returns the status of the last check.
func (m *Monitor) Last() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Check runs every check once: canaries, the stored-vector sample, drift,
// query drift, lag, errors and, with a target, freshness; then publishes
// one event per signal.
func (m *Monitor) Check(ctx context.Context, opts CheckOptions) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.deps.Now()
	st := Status{Time: now}
	var sigs []tagged
	var errs []error

	fid, fsigs, count, err := m.checkFidelity(ctx, opts)
	st.Fidelity, st.Sample, sigs = fid, count, append(sigs, fsigs...)
	st.Baselines = m.lastBaselines
	if err != nil {
		errs = append(errs, err)
	}

	debt, dsigs, err := m.checkDebt(ctx, now)
	st.Debt, sigs = debt, append(sigs, dsigs...)
	if err != nil {
		errs = append(errs, err)
	}

	if err := m.readNewChunks(ctx); err != nil {
		errs = append(errs, err)
	}
	st.Drift = m.drift.Check()
	st.Query = m.queryRef.Check()
	st.QueryCorpus = m.query.Check()
	sigs = append(sigs, driftSignals(TagDrift, st.Drift)...)
	sigs = append(sigs, driftSignals(TagQueryDrift, st.Query)...)
	sigs = append(sigs, corpusSignals(st.QueryCorpus)...)
	if !opts.NoSave {
		if err := m.saveWindows(ctx); err != nil {
			errs = append(errs, err)
		}
	}

	snap := m.snap.take(now)
	if m.deps.Budget != nil {
		if bs, ok := m.pbudget.observe(now, m.deps.Budget(), m.cfg.BudgetBoundShare); ok {
			st.Budget = &bs
			sigs = append(sigs, budgetSignal(bs, m.cfg.BudgetBoundShare))
			m.metrics.budgetBound.Set(b2f(bs.Bound))
		}
	}
	if m.deps.Lag != nil {
		ls, err := m.checkLag(ctx, now, snap.ThroughputPerSecond, st.Budget)
		if err != nil {
			errs = append(errs, err)
		} else {
			st.Lag = &ls
			snap.LagRecords = ls.TotalRecords
			snap.LagSeconds = max(snap.LagSeconds, ls.MaxSeconds)
			det := map[string]float64{"lag_records": float64(ls.TotalRecords), "predicted_records_15m": ls.Predicted,
				"slope_per_second": ls.SlopePerSecond, "max_seconds": ls.MaxSeconds}
			if ls.CappedBy != "" {
				// What the lag alone asks for; the budget holds the
				// recommendation at the current count.
				det["uncapped_replicas"] = float64(ls.Uncapped)
			}
			sigs = append(sigs, tagged{tag: TagLag, sig: Signal{Method: "recommended_replicas", Score: float64(ls.Recommended),
				Threshold: float64(ls.Replicas), Exceeded: ls.Recommended > ls.Replicas, Details: det}})
		}
	}
	sigs = append(sigs, tagged{tag: TagErrors, sig: Signal{Method: "dead_letters_per_second", Score: snap.ErrorRate,
		Exceeded: snap.ErrorRate > 0, Details: map[string]float64{"retries_per_second": snap.RetryRate, "dead_letters": snap.DeadLetters}}})
	if m.deps.FreshnessTarget > 0 {
		var b Backlog
		if m.deps.Backlog != nil {
			b = m.deps.Backlog()
		}
		sigs = append(sigs, freshnessSignal(m.deps.FreshnessTarget, snap, m.snap.watermarkAge, b)...)
	}

	st.Events = m.events(now, sigs, snap)
	for _, e := range st.Events {
		st.Breach = st.Breach || e.Signal.Exceeded
	}
	if !opts.NoPublish && len(m.pubs) > 0 {
		if err := m.publishAll(ctx, st.Events); err != nil {
			errs = append(errs, err)
		}
	}
	m.last = st
	outcome := "ok"
	if len(errs) > 0 {
		outcome = "failed"
	}
	m.metrics.checks.WithLabelValues(outcome).Inc()
	return st, errors.Join(errs...)
}

type tagged struct {
	tag string
	sig Signal
	// sample is the provenance of the stored chunks the signal measured;
	// nil for a signal that measured none.
	sample *SampleProvenance
}

// events turns signals into fused events and sets their gauges.
func (m *Monitor) events(now time.Time, sigs []tagged, snap MetricsSnapshot) []Event {
	version := ""
	if m.deps.ModelVersion != nil {
		version = m.deps.ModelVersion()
	}
	logs := m.deps.Logs.Recent(2 * m.cfg.Interval)
	if len(logs) > 10 {
		logs = logs[len(logs)-10:]
	}
	if m.deps.Redact != nil {
		for i := range logs {
			logs[i].Message, logs[i].Error = m.deps.Redact(logs[i].Message), m.deps.Redact(logs[i].Error)
		}
	}
	// The slowest or failed batches recorded, then the traces of the
	// warnings (a dead letter, a failed apply): both lead to a trace.
	traces := m.worst.rotate()
	for i := len(logs) - 1; i >= 0 && len(traces) < 2*maxWorst; i-- {
		if id := logs[i].TraceID; id != "" && !slices.Contains(traces, id) {
			traces = append(traces, id)
		}
	}
	out := make([]Event, 0, len(sigs))
	for _, s := range sigs {
		key := s.tag + "/" + s.sig.Method
		prev, seen := m.alarms[key]
		m.alarms[key] = s.sig.Exceeded
		m.metrics.score.WithLabelValues(s.tag, s.sig.Method).Set(s.sig.Score)
		m.metrics.threshold.WithLabelValues(s.tag, s.sig.Method).Set(s.sig.Threshold)
		m.metrics.exceeded.WithLabelValues(s.tag, s.sig.Method).Set(b2f(s.sig.Exceeded))
		out = append(out, Event{
			Schema: EventSchema, ID: newEventID(), Time: now, Index: m.deps.Index, Model: m.emb.Model(),
			ModelVersion: version, SemanticTag: s.tag, Signal: s.sig, Changed: seen && prev != s.sig.Exceeded || !seen && s.sig.Exceeded,
			Metrics: snap, Logs: nonNil(logs), TraceIDs: nonNil(traces), SampleProvenance: s.sample,
		})
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// driftSignals turns a drift result into signals. psi_max alone carries the
// alarm (PSI at PSIMajor confirmed by KS, with hysteresis); ks_p_bonferroni
// and centroid_cosine are details, never exceeded: at the window sizes
// used, KS finds a significant difference on stationary data at nearly
// every check (the projections are fitted on the reference), so alone it
// would be an alarm that is always on.
func driftSignals(tag string, r DriftResult) []tagged {
	if !r.Ready {
		return nil
	}
	det := map[string]float64{"reference_n": float64(r.RefN), "current_n": float64(r.CurN),
		"ks_p_corrected": r.KSPCorrected, "centroid_cosine": r.CentroidCosine, "centroid_euclidean": r.CentroidEuclidean}
	for i, name := range r.Projections {
		det["psi_"+name] = r.PSI[i]
		det["ks_d_"+name] = r.KSD[i]
	}
	return []tagged{
		{tag: tag, sig: Signal{Method: "psi_max", Score: r.PSIMax, Threshold: PSIMajor, Exceeded: r.Alarm, Details: det}},
		{tag: tag, sig: Signal{Method: "ks_p_bonferroni", Score: r.KSPCorrected, Threshold: KSAlpha}},
		{tag: tag, sig: Signal{Method: "centroid_cosine", Score: r.CentroidCosine}},
	}
}

// corpusSignals report the queries' distance to the corpus under the
// query_drift tag: scores only, never exceeded.
func corpusSignals(r DriftResult) []tagged {
	if !r.Ready {
		return nil
	}
	det := map[string]float64{"reference_n": float64(r.RefN), "current_n": float64(r.CurN),
		"ks_p_corrected": r.KSPCorrected, "centroid_euclidean": r.CentroidEuclidean}
	return []tagged{
		{tag: TagQueryDrift, sig: Signal{Method: "corpus_psi_max", Score: r.PSIMax, Threshold: PSIMajor, Details: det}},
		{tag: TagQueryDrift, sig: Signal{Method: "corpus_centroid_cosine", Score: r.CentroidCosine}},
	}
}

func (m *Monitor) checkLag(ctx context.Context, now time.Time, throughput float64, budget *BudgetStatus) (LagStatus, error) {
	lag, err := m.deps.Lag.Lag(ctx)
	if err != nil {
		return LagStatus{}, fmt.Errorf("read kafka lag: %w", err)
	}
	parts, err := m.deps.Lag.Partitions(ctx)
	if err != nil {
		return LagStatus{}, fmt.Errorf("read partition count: %w", err)
	}
	ls := m.lag.observe(now, lag, throughput, parts, m.cfg.MaxReplicas, m.cfg.DrainTarget)
	if budget != nil {
		// Replicas share the provider budget: while it binds, more of
		// them only wait longer.
		capReplicas(&ls, *budget)
	}
	m.setLagMetrics(ls)
	return ls, nil
}
