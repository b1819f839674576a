package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// DebtStore is what the repayment of reuse debt needs from the sink.
type DebtStore interface {
	OutstandingDebt(ctx context.Context, due time.Time) (sink.DebtSummary, error)
	NextDebt(ctx context.Context, due time.Time, limit int) ([]sink.Debt, error)
	RewriteVectors(ctx context.Context, rws []sink.Rewrite, onlyDebt bool) (int, error)
}

// ReuseSamples yields the monitor's measurements of reused vectors taken
// after since (sink.Store.ReusedMeasurements).
type ReuseSamples interface {
	ReusedMeasurements(ctx context.Context, since time.Time) ([]sink.ReusedMeasurement, error)
}

// DebtConfig is the background repayment of near-duplicate reuse debt
// (the reuse: section of ragsync.yaml).
type DebtConfig struct {
	// Window is how long a chunk may stand on a reused vector before an
	// exact one replaces it. Defaults to 5m.
	Window time.Duration
	// MaxTokensPerHour caps what the repayment sends to the embedding API
	// in any hour; when the debt falling due needs more, the window is
	// missed and ragsync_pipeline_debt_behind says so. Defaults to
	// 2,000,000.
	MaxTokensPerHour int
	// Interval is how often the repayment looks at the debt. Defaults to a
	// tenth of Window.
	Interval time.Duration
	// BatchSize is how many chunks go in one embedding request and one
	// transaction. Defaults to 16: small enough that a live change never
	// waits long behind a repayment's write.
	BatchSize int
	// Yield, when set, is called before each write and returns once live
	// work leaves room (Lanes.Wait); its error ends the round. Nil writes
	// at once.
	Yield func(ctx context.Context) error
	// Predictor, when set, learns from every repayment: the reused vector
	// against the fresh one is a measured reuse. Share it with
	// ReuseConfig.Predictor.
	Predictor *Predictor
	// Samples, when set with Predictor, feeds the predictor the monitor's
	// measurements of reused vectors at every round, besides the
	// repayments' own. Nil learns from repayments only.
	Samples ReuseSamples
	// Now is the repayment's clock; it must agree with ReuseConfig.Now.
	// Nil means the wall clock.
	Now func() time.Time
	// Logger receives warnings (window missed, a round failed). Nil
	// discards.
	Logger *slog.Logger
	// Registerer receives the debt metrics. Nil registers nothing.
	Registerer prometheus.Registerer
}

func (c DebtConfig) withDefaults() DebtConfig {
	if c.Window == 0 {
		c.Window = 5 * time.Minute
	}
	if c.MaxTokensPerHour == 0 {
		c.MaxTokensPerHour = 2_000_000
	}
	if c.Interval == 0 {
		c.Interval = c.Window / 10
	}
	if c.BatchSize == 0 {
		c.BatchSize = 16
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field, named by its ragsync.yaml path.
func (c DebtConfig) Validate() error {
	var errs []error
	if c.Window < 0 || (c.Window > 0 && c.Window < time.Second) {
		errs = append(errs, fmt.Errorf("reuse.repay_window: %s must be at least 1s, e.g. 5m", c.Window))
	}
	if c.MaxTokensPerHour < 0 {
		errs = append(errs, errors.New("reuse.repay_max_tokens_per_hour: must be > 0, e.g. 2000000"))
	}
	if c.Interval < 0 {
		errs = append(errs, errors.New("reuse.repay_interval: must be > 0, e.g. 30s (default: a tenth of reuse.repay_window)"))
	}
	return errors.Join(errs...)
}

// Repayer replaces reused vectors with exact ones in the background, so
// that none stays borrowed longer than Window. Each round it repays
// everything whose window ends before the next round, oldest first, and
// beyond that spends what the rate that clears the outstanding debt in one
// window (outstanding tokens × Interval ÷ Window) has accrued: on the debt
// with new words first, then the farthest predicted, then the oldest.
// MaxTokensPerHour caps it. It embeds through the
// embedder it is given, which should be a background lane (Lanes) so live
// changes go first. Safe for one Run at a time.
type Repayer struct {
	cfg     DebtConfig
	store   DebtStore
	emb     Embedder
	metrics *debtMetrics

	mu     sync.Mutex
	spent  []spend // tokens sent in the last hour
	behind bool
	credit float64 // tokens the repayment rate has accrued and not spent
	// sampled is the time of the latest monitor measurement learnt from.
	sampled time.Time
}

type spend struct {
	at     time.Time
	tokens int
}

// RepayResult says what one round did.
type RepayResult struct {
	// Repaid chunks got an exact vector; FromCache of them needed no call.
	Repaid, FromCache int
	// Tokens were sent to the embedding API.
	Tokens int
	// Outstanding is the debt left after the round.
	Outstanding sink.DebtSummary
	// Behind is true when the hourly cap kept debt past its window.
	Behind bool
}

// NewRepayer builds a repayment of store's debt that embeds with emb.
func NewRepayer(cfg DebtConfig, store DebtStore, emb Embedder) (*Repayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || emb == nil {
		return nil, errors.New("repayer: store and embedder are required")
	}
	cfg = cfg.withDefaults()
	m, err := newDebtMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Repayer{cfg: cfg, store: store, emb: emb, metrics: m}, nil
}

// Run repays every Interval until ctx ends, then returns nil. A failed
// round is logged and tried again next time: the debt stays recorded.
func (r *Repayer) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.RepayOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.WarnContext(ctx, "reuse debt repayment failed; will retry at the next interval", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RepayOnce runs one round at the configured clock's now.
func (r *Repayer) RepayOnce(ctx context.Context) (RepayResult, error) {
	now := r.cfg.Now()
	// Debt dated at or before due reaches its window's end before the next
	// round: it must go this round.
	return r.round(ctx, now, now.Add(r.cfg.Interval-r.cfg.Window))
}

// RepayAll repays the whole outstanding debt at once, whatever is left of
// its windows, within MaxTokensPerHour: for a bounded run (a backfill)
// that must not leave borrowed vectors behind for a serve that may never
// run. The result's Outstanding is what the hourly cap left.
func (r *Repayer) RepayAll(ctx context.Context) (RepayResult, error) {
	now := r.cfg.Now()
	// Everything is due. A window's margin past now also covers debt that
	// Postgres dated (by its clock, when the pipeline gave none) a moment
	// ahead of ours.
	return r.round(ctx, now, now.Add(r.cfg.Window))
}

// round repays what is due at due, and beyond that what the accrued credit
// covers.
func (r *Repayer) round(ctx context.Context, now, due time.Time) (RepayResult, error) {
	var res RepayResult
	if err := r.learn(ctx); err != nil {
		return res, err
	}
	sum, err := r.store.OutstandingDebt(ctx, due)
	if err != nil {
		return res, err
	}
	res.Outstanding = sum
	r.observe(now, sum)
	if sum.Vectors == 0 {
		r.setBehind(ctx, false, sum)
		return res, nil
	}
	// The rate that clears the outstanding debt in one window accrues as
	// credit; a chunk not yet due waits until the credit covers it, so a
	// lone debt is repaid near its deadline (an edit of the same chunk
	// before then makes its repayment unnecessary) while a large debt
	// drains steadily. Debt due before the next round goes regardless.
	r.mu.Lock()
	r.credit = min(r.credit+float64(sum.Tokens)*float64(r.cfg.Interval)/float64(r.cfg.Window), float64(sum.Tokens))
	r.mu.Unlock()
	left := int64(r.remaining(now))
	res.Behind = sum.DueTokens > left
	r.setBehind(ctx, res.Behind, sum)
	seen := map[int64]bool{}
	for {
		next, err := r.store.NextDebt(ctx, due, r.cfg.BatchSize)
		if err != nil {
			return res, err
		}
		var batch []sink.Debt
		for _, d := range next {
			if seen[d.ChunkID] {
				continue
			}
			cost := int64(d.Tokens)
			if d.Cached {
				cost = 0
			}
			if cost > left {
				break
			}
			if d.Since.After(due) {
				r.mu.Lock()
				ok := float64(cost) <= r.credit
				if ok {
					r.credit -= float64(cost)
				}
				r.mu.Unlock()
				if !ok {
					break
				}
			}
			seen[d.ChunkID] = true
			batch = append(batch, d)
			left -= cost
		}
		if len(batch) == 0 {
			break
		}
		n, tokens, cached, err := r.repay(ctx, now, batch)
		if err != nil {
			return res, err
		}
		res.Repaid += n
		res.FromCache += cached
		res.Tokens += tokens
		if n == 0 && tokens == 0 {
			break
		}
	}
	if res.Repaid > 0 {
		if sum, err = r.store.OutstandingDebt(ctx, due); err != nil {
			return res, err
		}
		res.Outstanding = sum
		r.observe(now, sum)
	}
	return res, nil
}

// learn feeds the predictor the monitor's new measurements of reused
// vectors: each is a reuse whose distance was measured.
func (r *Repayer) learn(ctx context.Context) error {
	if r.cfg.Samples == nil || r.cfg.Predictor == nil {
		return nil
	}
	ms, err := r.cfg.Samples.ReusedMeasurements(ctx, r.sampled)
	if err != nil {
		return err
	}
	for _, m := range ms {
		r.cfg.Predictor.Observe(chunker.EditSimilarity(m.Text, m.OriginText, 0), m.Distance)
		if m.MeasuredAt.After(r.sampled) {
			r.sampled = m.MeasuredAt
		}
	}
	return nil
}

// repay embeds the batch's texts (those the cache lacks), learns from each
// measured reuse and writes the vectors in one transaction.
func (r *Repayer) repay(ctx context.Context, now time.Time, batch []sink.Debt) (written, tokens, cached int, err error) {
	var texts []string
	var idx []int
	for i, d := range batch {
		if !d.Cached {
			texts, idx = append(texts, d.Text), append(idx, i)
			tokens += d.Tokens
		}
	}
	rws := make([]sink.Rewrite, len(batch))
	for i, d := range batch {
		rws[i] = sink.Rewrite{ChunkID: d.ChunkID, Hash: d.Hash, Text: d.Text}
	}
	if len(texts) > 0 {
		vecs, err := r.emb.Embed(ctx, texts)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("repay reuse debt: embed %d chunks: %w", len(texts), err)
		}
		if len(vecs) != len(texts) {
			return 0, 0, 0, fmt.Errorf("repay reuse debt: embedder returned %d vectors for %d texts", len(vecs), len(texts))
		}
		r.record(now, tokens)
		model := r.emb.ReportedModel()
		for j, i := range idx {
			rws[i].Vector, rws[i].ModelVersion = vecs[j], model
			d := batch[i]
			if r.cfg.Predictor != nil && d.OriginText != "" && len(d.Vector) == len(vecs[j]) {
				sim := chunker.EditSimilarity(d.Text, d.OriginText, 0)
				r.cfg.Predictor.Observe(sim, cosineDistance(d.Vector, vecs[j]))
			}
		}
	}
	if r.cfg.Yield != nil {
		if err := r.cfg.Yield(ctx); err != nil {
			return 0, tokens, 0, err
		}
	}
	n, err := r.store.RewriteVectors(ctx, rws, true)
	if err != nil {
		return 0, tokens, 0, err
	}
	for _, d := range batch {
		if d.Cached {
			cached++
		}
	}
	r.metrics.repaidVectors.Add(float64(n))
	if r.cfg.Predictor != nil {
		s, _ := r.cfg.Predictor.Slope()
		r.metrics.slope.Set(s)
	}
	return n, tokens, cached, nil
}

// remaining is what the hourly cap still allows at now.
func (r *Repayer) remaining(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	cut := now.Add(-time.Hour)
	i := 0
	for i < len(r.spent) && !r.spent[i].at.After(cut) {
		i++
	}
	r.spent = r.spent[i:]
	used := 0
	for _, s := range r.spent {
		used += s.tokens
	}
	return max(r.cfg.MaxTokensPerHour-used, 0)
}

func (r *Repayer) record(now time.Time, tokens int) {
	r.mu.Lock()
	r.spent = append(r.spent, spend{at: now, tokens: tokens})
	r.mu.Unlock()
	r.metrics.tokens.Add(float64(tokens))
}

func (r *Repayer) observe(now time.Time, sum sink.DebtSummary) {
	r.metrics.vectors.Set(float64(sum.Vectors))
	r.metrics.debtTokens.Set(float64(sum.Tokens))
	age := 0.0
	if !sum.Oldest.IsZero() {
		age = max(now.Sub(sum.Oldest).Seconds(), 0)
	}
	r.metrics.oldest.Set(age)
}

// setBehind reports, once per change, that the hourly cap keeps debt past
// its window or that it no longer does.
func (r *Repayer) setBehind(ctx context.Context, behind bool, sum sink.DebtSummary) {
	r.mu.Lock()
	was := r.behind
	r.behind = behind
	r.mu.Unlock()
	if behind {
		r.metrics.behind.Set(1)
	} else {
		r.metrics.behind.Set(0)
	}
	if behind && !was {
		r.cfg.Logger.WarnContext(ctx, "reuse debt is past its repayment window: reuse.repay_max_tokens_per_hour is spent; raise it, or lengthen reuse.repay_window",
			"due_vectors", sum.DueVectors, "due_tokens", sum.DueTokens, "max_tokens_per_hour", r.cfg.MaxTokensPerHour, "window", r.cfg.Window.String())
	}
}

// cosineDistance is 1 − cos(a, b); 1 for a zero vector.
func cosineDistance(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 1
	}
	return 1 - dot/math.Sqrt(na*nb)
}

type debtMetrics struct {
	vectors, debtTokens, oldest, behind, slope prometheus.Gauge
	tokens, repaidVectors                      prometheus.Counter
}

func newDebtMetrics(reg prometheus.Registerer) (*debtMetrics, error) {
	m := &debtMetrics{
		vectors: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_pipeline_debt_vectors",
			Help: "Chunks standing on a reused (near-duplicate) vector, not yet repaid."}),
		debtTokens: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_pipeline_debt_tokens",
			Help: "Estimated tokens it takes to repay the outstanding reuse debt."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_pipeline_debt_oldest_age_seconds",
			Help: "Age of the oldest reused vector not yet repaid."}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_pipeline_debt_behind",
			Help: "1 when reuse.repay_max_tokens_per_hour keeps debt past reuse.repay_window."}),
		slope: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ragsync_pipeline_reuse_distance_per_edit",
			Help: "The reuse predictor's slope: predicted cosine distance per unit of word-edit dissimilarity."}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "ragsync_pipeline_debt_repaid_tokens_total",
			Help: "Tokens sent to the embedding API to repay reuse debt."}),
		repaidVectors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ragsync_pipeline_debt_repaid_vectors_total",
			Help: "Reused vectors replaced by exact ones."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.vectors, m.debtTokens, m.oldest, m.behind, m.slope, m.tokens, m.repaidVectors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register reuse debt metrics: %w", err)
			}
		}
	}
	return m, nil
}
