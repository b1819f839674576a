package monitor

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ragsync/ragsync/chunker"
)

func (m *Monitor) probes() []string {
	if len(m.cfg.Canaries) > 0 {
		return m.cfg.Canaries
	}
	return DefaultProbes()
}

// Baselines describes the stored canary baselines of the index.
type Baselines struct {
	// Probes is how many probe texts have a baseline; Missing how many
	// configured probes have none.
	Probes  int `json:"probes"`
	Missing int `json:"missing"`
	// TakenBy lists the commands that took them ("serve", "monitor
	// baseline"), and TakenAt when the newest was taken.
	TakenBy []string  `json:"taken_by,omitempty"`
	TakenAt time.Time `json:"taken_at,omitzero"`
}

// TakeBaselines embeds the probe texts that have no baseline and stores
// them as taken by by; with reset it first forgets every baseline of the
// index, so all are taken again with the current embedder (after a
// baseline was taken against the wrong endpoint). It returns how many it
// stored.
func (m *Monitor) TakeBaselines(ctx context.Context, reset bool, by string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if reset {
		if err := m.st.resetCanaries(ctx); err != nil {
			return 0, err
		}
	}
	n, err := m.ensureCanaries(ctx, by)
	if err == nil {
		m.baseline = true
	}
	return n, err
}

// Baselines reads what TakeBaselines or serve stored.
func (m *Monitor) Baselines(ctx context.Context) (Baselines, error) {
	have, err := m.st.canaries(ctx)
	if err != nil {
		return Baselines{}, err
	}
	return m.describe(have), nil
}

func (m *Monitor) describe(have map[string]canary) Baselines {
	var b Baselines
	for _, t := range m.probes() {
		c, ok := have[textHash(t)]
		if !ok {
			b.Missing++
			continue
		}
		b.Probes++
		by := c.takenBy
		if by == "" {
			by = "unknown (taken before ragsync recorded it)"
		}
		if !slices.Contains(b.TakenBy, by) {
			b.TakenBy = append(b.TakenBy, by)
		}
		if c.takenAt.After(b.TakenAt) {
			b.TakenAt = c.takenAt
		}
	}
	slices.Sort(b.TakenBy)
	return b
}

// ensureCanaries stores a baseline for every probe text that has none,
// recorded as taken by by, and returns how many it stored.
func (m *Monitor) ensureCanaries(ctx context.Context, by string) (int, error) {
	have, err := m.st.canaries(ctx)
	if err != nil {
		return 0, err
	}
	var texts []string
	for _, t := range m.probes() {
		if _, ok := have[textHash(t)]; !ok {
			texts = append(texts, t)
		}
	}
	if len(texts) == 0 {
		return 0, nil
	}
	vecs, err := m.emb.Embed(ctx, texts)
	if err != nil {
		return 0, fmt.Errorf("embed %d canary baselines: %w", len(texts), err)
	}
	tokens := 0
	cs := make([]canary, len(texts))
	for i, t := range texts {
		cs[i] = canary{hash: textHash(t), text: t, vec: vecs[i]}
		tokens += chunker.CountTokens(t)
	}
	m.metrics.tokens.WithLabelValues("canary").Add(float64(tokens))
	if err := m.st.addCanaries(ctx, cs, by); err != nil {
		return 0, err
	}
	m.logger.InfoContext(ctx, "canary baselines stored", "probes", len(cs), "model", m.emb.Model(), "taken_by", by)
	return len(cs), nil
}

// checkFidelity re-embeds the canaries and a sample of stored chunks; the
// count says what the sample asked for and measured (nil without one).
func (m *Monitor) checkFidelity(ctx context.Context, opts CheckOptions) ([]Aggregate, []tagged, *SampleCount, error) {
	l2Bound := NormalisedL2Bound(m.cfg.L2Threshold, m.emb.Dimensions())
	var aggs []Aggregate
	var sigs []tagged

	if !m.baseline && m.deps.BaselineBy != "" {
		if _, err := m.ensureCanaries(ctx, m.deps.BaselineBy); err != nil {
			return nil, nil, nil, err
		}
		m.baseline = true
	}
	have, err := m.st.canaries(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	m.lastBaselines = m.describe(have)
	var cs []canary
	tokens := 0
	for _, t := range m.probes() {
		if c, ok := have[textHash(t)]; ok {
			cs = append(cs, c)
			tokens += chunker.CountTokens(t)
		}
	}
	if len(cs) > 0 && m.budget.take(tokens) {
		texts := make([]string, len(cs))
		for i, c := range cs {
			texts[i] = c.text
		}
		vecs, err := m.emb.Embed(ctx, texts)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("re-embed %d canaries: %w", len(cs), err)
		}
		m.metrics.tokens.WithLabelValues("canary").Add(float64(tokens))
		// A baseline is compared as the index would store its vector
		// (rounded to half precision for halfvec), so the score is what
		// a query meets; Storage says how much of it the rounding is.
		ms := make([]Measurement, len(cs))
		for i, c := range cs {
			base := stored(m.deps.VectorType, c.vec)
			ms[i] = Measurement{Kind: KindCanary, Cosine: CosineDistance(base, vecs[i]), L2: L2(base, vecs[i])}
		}
		a := aggregate(KindCanary, ms, m.cfg.CosineBound, l2Bound)
		aggs = append(aggs, a)
		sigs = append(sigs, tagged{tag: TagFidelity, sig: Signal{Method: "canary_p50_cosine", Score: a.P50, Threshold: m.cfg.CosineBound,
			Exceeded: a.P50 > m.cfg.CosineBound, Details: aggDetails(a, l2Bound), Storage: storageError(m.deps.VectorType, vecs)}})
	} else if len(cs) > 0 {
		m.logger.WarnContext(ctx, "canary check skipped: monitor.max_tokens_per_hour is spent; raise it or lower monitor.sample_size",
			"tokens", tokens, "budget_left", m.budget.remaining())
	}

	var count *SampleCount
	n := m.cfg.SampleSize
	if opts.SampleSize != 0 {
		n = opts.SampleSize
	}
	if n > 0 {
		nu := int(math.Round(float64(n) * m.cfg.UniformShare))
		nr := (n - nu + 1) / 2
		picked, err := m.st.sampleChunks(ctx, m.rng, nr, n-nu-nr, nu)
		if err != nil {
			return aggs, sigs, nil, err
		}
		count = &SampleCount{Asked: n, FewReused: max(0, nr-countKind(picked, KindReused)),
			FewCached: max(0, n-nu-nr-countKind(picked, KindCached)), FewUniform: max(0, nu-countKind(picked, KindUniform))}
		// Spend what the budget allows, in pick order (reused first).
		var texts []string
		var take []sampled
		for _, p := range picked {
			if !m.budget.take(p.tokens) {
				break
			}
			texts, take = append(texts, p.text), append(take, p)
		}
		count.OverBudget = len(picked) - len(take)
		if len(take) < len(picked) {
			m.logger.WarnContext(ctx, "stored-vector sample cut short by monitor.max_tokens_per_hour",
				"sampled", len(take), "wanted", len(picked))
		}
		if len(take) > 0 {
			vecs, err := m.emb.Embed(ctx, texts)
			if err != nil {
				return aggs, sigs, count, fmt.Errorf("re-embed %d sampled chunks: %w", len(take), err)
			}
			ms := make([]Measurement, len(take))
			spent := 0
			for i, p := range take {
				ms[i] = Measurement{ChunkID: p.id, ContentHash: p.hash, Kind: p.kind, Tokens: p.tokens,
					Cosine: CosineDistance(p.vec, vecs[i]), L2: L2(p.vec, vecs[i]),
					ModelVersion: p.modelVersion, Chunker: p.chunker, TraceID: p.traceID}
				spent += p.tokens
			}
			m.metrics.tokens.WithLabelValues("sample").Add(float64(spent))
			count.Measured = len(ms)
			if err := m.st.saveSamples(ctx, ms, m.cfg.CosineBound); err != nil {
				return aggs, sigs, count, err
			}
			all := aggregate("all", ms, m.cfg.CosineBound, l2Bound)
			det := aggDetails(all, l2Bound)
			for _, kind := range []string{KindReused, KindCached, KindUniform} {
				var of []Measurement
				for _, x := range ms {
					if x.Kind == kind {
						of = append(of, x)
					}
				}
				a := aggregate(kind, of, m.cfg.CosineBound, l2Bound)
				aggs = append(aggs, a)
				det[kind+"_n"], det[kind+"_p50"], det[kind+"_p99"], det[kind+"_share_over_bound"] = float64(a.N), a.P50, a.P99, a.ShareOver
			}
			// The sample is weighted towards reused and old vectors, so its
			// overall share over the bound overstates the index's; the
			// uniform picks estimate the share of the whole index.
			score := all.ShareOver
			if u := aggs[len(aggs)-1]; u.Kind == KindUniform && u.N > 0 {
				score = u.ShareOver
			}
			// The stored vectors were read as the index holds them
			// (a halfvec index's rounded), so their distances include
			// the storage's part, which Storage measures on the same
			// fresh vectors.
			sigs = append(sigs, tagged{tag: TagFidelity, sig: Signal{Method: "uniform_share_over_bound", Score: score,
				Threshold: m.cfg.MaxShareOverBound, Exceeded: score > m.cfg.MaxShareOverBound, Details: det,
				Storage: storageError(m.deps.VectorType, vecs)},
				sample: sampleProvenance(ms, m.cfg.CosineBound)})
		}
	}
	for _, a := range aggs {
		m.metrics.fidelity.WithLabelValues(a.Kind, "p50").Set(a.P50)
		m.metrics.fidelity.WithLabelValues(a.Kind, "p99").Set(a.P99)
		m.metrics.fidelity.WithLabelValues(a.Kind, "share_over_bound").Set(a.ShareOver)
	}
	return aggs, sigs, count, nil
}

func aggDetails(a Aggregate, l2Bound float64) map[string]float64 {
	return map[string]float64{"n": float64(a.N), "p50": a.P50, "p99": a.P99, "max": a.Max,
		"share_over_bound": a.ShareOver, "share_over_l2_bound": a.ShareOverL2, "l2_bound": l2Bound}
}
