package monitor

import (
	"math"
	"slices"
)

// CosineDistance is 1 − cos(a, b), in [0, 2]; 1 when either vector is zero
// (nothing can be said about its direction).
func CosineDistance(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range min(len(a), len(b)) {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 1
	}
	return 1 - dot/math.Sqrt(na*nb)
}

// L2 is ‖a − b‖₂. For unit vectors it equals √(2·CosineDistance), so it is
// at most 2 whatever the dimensions: see NormalisedL2Bound.
func L2(a, b []float32) float64 {
	var s float64
	for i := range min(len(a), len(b)) {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// NormalisedL2Bound is the rule of the design notes this product grew from:
// a vector moved too far when ‖prev − curr‖₂ > threshold × dimensions
// (typical threshold 0.008). For unit vectors ‖prev − curr‖₂ ≤ 2, so the
// bound exceeds every possible distance once dimensions > 2/threshold (250
// at 0.008): at 384 or 1536 dimensions it can never fire. The monitor
// reports it for comparison but alarms on the cosine distance, which is
// scale-free for unit vectors (see docs/monitor.md).
func NormalisedL2Bound(threshold float64, dims int) float64 { return threshold * float64(dims) }

// Aggregate summarises the distances of one kind of measurement.
type Aggregate struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
	// P50 and P99 are cosine distances.
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	// Max is the largest cosine distance.
	Max float64 `json:"max"`
	// ShareOver is the share of measurements whose cosine distance is past
	// the bound.
	ShareOver float64 `json:"share_over_bound"`
	// ShareOverL2 is the share past the normalised L2 bound
	// (threshold × dimensions), reported for comparison.
	ShareOverL2 float64 `json:"share_over_l2_bound"`
}

// Measurement is one vector compared with a fresh embedding of its text.
type Measurement struct {
	ChunkID     int64
	ContentHash string
	Kind        string
	Tokens      int
	Cosine, L2  float64
	// ModelVersion, Chunker and TraceID are the stored chunk's provenance;
	// empty: unknown (written before provenance was recorded), and always
	// for a canary, which is no stored chunk.
	ModelVersion, Chunker, TraceID string
}

// aggregate computes the summary of ms against the cosine bound and the
// normalised L2 bound.
func aggregate(kind string, ms []Measurement, bound, l2Bound float64) Aggregate {
	a := Aggregate{Kind: kind, N: len(ms)}
	if len(ms) == 0 {
		return a
	}
	ds := make([]float64, len(ms))
	over, overL2 := 0, 0
	for i, m := range ms {
		ds[i] = m.Cosine
		if m.Cosine > bound {
			over++
		}
		if m.L2 > l2Bound {
			overL2++
		}
	}
	slices.Sort(ds)
	a.P50, a.P99, a.Max = quantile(ds, 0.5), quantile(ds, 0.99), ds[len(ds)-1]
	a.ShareOver = float64(over) / float64(len(ms))
	a.ShareOverL2 = float64(overL2) / float64(len(ms))
	return a
}

// quantile of sorted xs by linear interpolation between closest ranks.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}
