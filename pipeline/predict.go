package pipeline

import (
	"slices"
	"sync"
)

// DefaultDistancePerEdit is the Predictor's slope before it has measured
// enough reuses of its own: the cosine distance a reused vector is expected
// to be from a fresh embedding of the new text, per unit of word-edit
// dissimilarity (1 − EditSimilarity). It is the 99.5th percentile of
// distance ÷ dissimilarity over the near-duplicate chunk pairs of the
// first half of the edits-C history (long Markdown documents; 5.5, and
// 5.5 on the tldr pages of edits-A) under the offline hashing embedder,
// rounded up (TestPredictorCalibration measures it again and checks that
// the reuses it allows on the second half stay within the bound at p99;
// at the 99th percentile they did not on edits-A). The hashing
// embedder hashes words, word pairs and character 3-grams, so it moves more
// per changed word than a trained model: a real model's own measurements
// lower it within the first few hundred repayments.
const DefaultDistancePerEdit = 6.0

// predictorWindow is how many of the latest measurements the Predictor
// keeps, and predictorMin how many it needs before it trusts them over
// DefaultDistancePerEdit.
const (
	predictorWindow = 2000
	predictorMin    = 50
	predictorQ      = 0.995
)

// Predictor predicts how far a reused vector is from a fresh embedding of
// the text that reuses it, from their word-edit similarity: distance ≈
// slope × (1 − similarity), the slope being the 99th percentile of
// distance ÷ dissimilarity over the latest measured reuses. It learns from
// every measured reuse (Observe): each repayment of reuse debt, and the
// monitor's samples of reused vectors. Safe for concurrent use.
type Predictor struct {
	mu     sync.Mutex
	prior  float64
	ratios []float64 // ring of the latest measured distance ÷ dissimilarity
	next   int
	slope  float64
	n      int64 // measurements observed in all
}

// NewPredictor returns a predictor whose slope is prior until it has
// measured enough reuses; prior ≤ 0 means DefaultDistancePerEdit.
func NewPredictor(prior float64) *Predictor {
	if prior <= 0 {
		prior = DefaultDistancePerEdit
	}
	return &Predictor{prior: prior, slope: prior}
}

// Predict returns the expected cosine distance of a vector reused across a
// word-edit similarity of sim.
func (p *Predictor) Predict(sim float64) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slope * (1 - sim)
}

// MinSimilarity is the least similarity whose predicted distance stays at
// or under bound.
func (p *Predictor) MinSimilarity(bound float64) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return 1 - bound/p.slope
}

// Slope returns the current slope and how many measurements it has seen.
func (p *Predictor) Slope() (float64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slope, p.n
}

// Observe records one measured reuse: the similarity it was chosen at and
// the cosine distance measured between the reused vector and a fresh one.
// Exact reuses (sim 1) carry no slope and are ignored.
func (p *Predictor) Observe(sim, distance float64) {
	if sim >= 1 || sim <= 0 || distance < 0 {
		return
	}
	r := distance / (1 - sim)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if len(p.ratios) < predictorWindow {
		p.ratios = append(p.ratios, r)
	} else {
		p.ratios[p.next] = r
		p.next = (p.next + 1) % predictorWindow
	}
	if len(p.ratios) >= predictorMin {
		p.slope = quantile(p.ratios, predictorQ)
	}
}

// quantile returns the q-quantile of xs (nearest rank, rounding up, so a
// small sample errs on the high side).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.999999)
	return s[min(max(i-1, 0), len(s)-1)]
}
