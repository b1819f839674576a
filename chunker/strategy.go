package chunker

import "math"

// greedy packs consecutive units up to target tokens, and opens a new chunk
// at a heading once the current one has min tokens. Simple and dense, but an
// edit that changes a block's size shifts every later boundary.
type greedy struct{ target, min int }

func (g greedy) boundaries(units []unit, est estimator) []int {
	var ends []int
	start := 0
	for k := 1; k < len(units); k++ {
		if est.tokens(start, k+1) > g.target ||
			(units[k].heading && est.tokens(start, k) >= g.min) {
			ends = append(ends, k)
			start = k
		}
	}
	return append(ends, len(units))
}

// contentDefined cuts after a unit whose content digest falls under a
// threshold, once the chunk has min tokens. The decision depends only on
// the unit's own text (and, for the unit that crosses min, on how far past
// min it reaches), so after an edit the boundaries resynchronise at the
// first qualifying unit past the edited one: the chunks before and after it
// keep their hashes (the rsync/restic idea applied to blocks, not bytes).
//
// The threshold makes cuts a Poisson process over tokens past min with mean
// gap target-min: a unit adding n tokens past min cuts with probability
// 1-exp(-n/(target-min)). Chunks then average about target tokens (plus
// half a unit of rounding) whatever the block sizes. Headings also cut once
// min is reached, and max is never crossed; both are local decisions too.
type contentDefined struct {
	min, max int
	mean     float64 // target-min: the mean tokens past min before a cut
}

func newContentDefined(cfg Config) contentDefined {
	return contentDefined{min: cfg.MinTokens, max: cfg.MaxTokens, mean: float64(cfg.TargetTokens - cfg.MinTokens)}
}

// cuts reports whether a boundary follows u, which brings n tokens past min.
func (c contentDefined) cuts(u unit, n int) bool {
	if c.mean <= 0 {
		return true
	}
	p := -math.Expm1(-float64(n) / c.mean)
	// u.cut is a uniform 64-bit digest; compare it as a fraction of 2^64.
	return float64(u.cut) < p*(1<<64)
}

func (c contentDefined) boundaries(units []unit, est estimator) []int {
	var ends []int
	start := 0
	for k := range units {
		if k > start && (est.tokens(start, k+1) > c.max ||
			(units[k].heading && est.tokens(start, k) >= c.min)) {
			ends = append(ends, k)
			start = k
		}
		if k+1 == len(units) {
			break
		}
		size := est.tokens(start, k+1)
		if size < c.min {
			continue
		}
		past := min(size-c.min, est.tokens(k, k+1)) // tokens of u beyond min
		if c.cuts(units[k], past) {
			ends = append(ends, k+1)
			start = k + 1
		}
	}
	return append(ends, len(units))
}
