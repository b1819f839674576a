package monitor

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKS(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	normal := func(n int, mu float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = rng.NormFloat64() + mu
		}
		return out
	}
	tests := []struct {
		name         string
		a, b         []float64
		wantDMin     float64
		wantDMax     float64
		wantPBelow   float64
		wantPAtLeast float64
	}{
		{"identical", []float64{1, 2, 3}, []float64{1, 2, 3}, 0, 0, 1.01, 0.99},
		{"disjoint", []float64{1, 2, 3}, []float64{4, 5, 6}, 1, 1, 0.2, 0},
		{"same distribution", normal(1000, 0), normal(1000, 0), 0, 0.08, 1.01, 0.01},
		{"shifted by 0.5 sd", normal(1000, 0), normal(1000, 0.5), 0.12, 0.3, 1e-6, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, p := ks(tc.a, tc.b)
			require.GreaterOrEqual(t, d, tc.wantDMin)
			require.LessOrEqual(t, d, tc.wantDMax)
			require.Less(t, p, tc.wantPBelow)
			require.GreaterOrEqual(t, p, tc.wantPAtLeast)
		})
	}
	// Kolmogorov's distribution at its well-known 5% point.
	require.InDelta(t, 0.05, kolmogorovQ(1.358), 0.001)
	require.Equal(t, 1.0, bonferroni([]float64{0.5, 0.9}))
	require.InDelta(t, 0.04, bonferroni([]float64{0.01, 0.5, 0.2, 0.3}), 1e-12)
}

func TestPSI(t *testing.T) {
	ref := make([]float64, 1000)
	for i := range ref {
		ref[i] = float64(i)
	}
	require.InDelta(t, 0, psi(ref, ref, 10), 1e-12, "same sample")
	// Everything in the top decile: shares 1/1010… vs ~0.99; +1 smoothing
	// keeps it finite.
	top := make([]float64, 1000)
	for i := range top {
		top[i] = 995
	}
	p := psi(ref, top, 10)
	require.False(t, math.IsInf(p, 0))
	require.Greater(t, p, PSIMajor)
	// A mild shift lands between "noticeable" and "major".
	shift := make([]float64, 1000)
	for i := range shift {
		shift[i] = float64(i) + 150
	}
	p = psi(ref, shift, 10)
	require.Greater(t, p, PSINoticeable)
	require.Less(t, p, 1.0)
}

func TestPrincipalDirections(t *testing.T) {
	// Points spread along (1,1,0)/√2 with a little noise on the others:
	// the first direction must be that axis.
	rng := rand.New(rand.NewPCG(2, 2))
	var vs [][]float32
	for range 500 {
		s := rng.NormFloat64() * 3
		vs = append(vs, []float32{float32(s + 0.1*rng.NormFloat64()), float32(s + 0.1*rng.NormFloat64()), float32(0.1 * rng.NormFloat64())})
	}
	dirs := principalDirections(vs, centroid(vs), 2, 50)
	require.Len(t, dirs, 2)
	require.InDelta(t, 1, math.Abs(dirs[0][0]+dirs[0][1])/math.Sqrt2, 1e-3)
	var dot float64
	for i := range dirs[0] {
		dot += dirs[0][i] * dirs[1][i]
	}
	require.InDelta(t, 0, dot, 1e-6, "directions are orthogonal")
}

func TestDistances(t *testing.T) {
	a, b := []float32{1, 0}, []float32{0, 1}
	require.InDelta(t, 1, CosineDistance(a, b), 1e-12)
	require.InDelta(t, math.Sqrt2, L2(a, b), 1e-6)
	require.InDelta(t, 2, CosineDistance(a, []float32{-1, 0}), 1e-12)
	require.Equal(t, 1.0, CosineDistance(a, []float32{0, 0}), "zero vector: no direction")
	// The design notes' bound: unreachable for unit vectors past 250 dims.
	require.Greater(t, NormalisedL2Bound(0.008, 251), 2.0)
	require.Less(t, NormalisedL2Bound(0.008, 249), 2.0)

	agg := aggregate("x", []Measurement{{Cosine: 0.01, L2: 0.1}, {Cosine: 0.02, L2: 0.2}, {Cosine: 0.5, L2: 1}}, 0.05, 0.5)
	require.Equal(t, 3, agg.N)
	require.InDelta(t, 0.02, agg.P50, 1e-12)
	require.InDelta(t, 1.0/3, agg.ShareOver, 1e-12)
	require.InDelta(t, 1.0/3, agg.ShareOverL2, 1e-12)
	require.Equal(t, 0, aggregate("empty", nil, 0.05, 0.5).N)
}

// TestDriftHysteresis: the alarm goes on at a major shift confirmed by KS,
// stays on while PSI is above "noticeable", goes off below it.
func TestDriftHysteresis(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	// Like embeddings, the vectors share a dominant direction (e0); the
	// shift turns them towards e1, away from the reference centroid.
	vec := func(shift float64) []float32 {
		v := make([]float32, 8)
		for i := range v {
			v[i] = float32(0.5 * rng.NormFloat64())
		}
		v[0] += 3
		v[1] += float32(shift)
		return v
	}
	d := NewDrift(2000, 1000, 2)
	feed := func(n int, shift float64) {
		for range n {
			d.Observe(vec(shift))
		}
	}
	feed(2000, 0)
	require.False(t, d.Check().Ready, "current window still empty")
	feed(1000, 0)
	r := d.Check()
	require.True(t, r.Ready)
	require.False(t, r.Alarm)
	feed(1000, 3)
	r = d.Check()
	require.True(t, r.Alarm, "major shift: %+v", r)
	// Partly back: while PSI stays at or above "noticeable" the alarm stays.
	between := 0
	for r.PSIMax >= PSINoticeable {
		require.True(t, r.Alarm, "hysteresis keeps it on at PSI %.3f", r.PSIMax)
		if r.PSIMax < PSIMajor {
			between++
		}
		feed(100, 0)
		r = d.Check()
	}
	require.Positive(t, between, "some check fell between the thresholds")
	require.False(t, r.Alarm, "off below noticeable")
	feed(1000, 0)
	r = d.Check()
	require.False(t, r.Alarm, "back to normal: PSI %.3f", r.PSIMax)
}

func TestBudget(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBudget(3600, func() time.Time { return now })
	require.True(t, b.take(3000))
	require.False(t, b.take(1000), "over the hour's budget")
	now = now.Add(10 * time.Minute) // refills 600
	require.True(t, b.take(1000))
	now = now.Add(10 * time.Hour)
	require.InDelta(t, 3600, b.remaining(), 1e-9, "never banks more than an hour")
}

func TestLagPrediction(t *testing.T) {
	var l lagTracker
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var st LagStatus
	// Lag grows by 100 records a minute on 2 of 6 partitions (3 members),
	// while this member consumes 10 records/s.
	for i := range 6 {
		lag := map[string]map[int32]int64{"t": {0: int64(500 + 50*i), 1: int64(500 + 50*i)}}
		st = l.observe(t0.Add(time.Duration(i)*time.Minute), lag, 10, 6, 0, 5*time.Minute)
	}
	require.InDelta(t, 100.0/60, st.SlopePerSecond, 1e-9)
	require.InDelta(t, 1500+1500, st.Predicted, 1e-6, "1500 now + 15 min at 100/min")
	require.Equal(t, 3, st.Replicas)
	require.Greater(t, st.Recommended, st.Replicas, "a growing backlog asks for more")
	require.LessOrEqual(t, st.Recommended, 6, "never more than the partitions")
	require.InDelta(t, 750/5.0, st.Partitions["t"][0].Seconds, 1e-9, "records over the partition's share of throughput")

	// Bounded by max_replicas, and by the partition count.
	st = l.observe(t0.Add(7*time.Minute), map[string]map[int32]int64{"t": {0: 1e6, 1: 1e6}}, 10, 6, 4, time.Minute)
	require.Equal(t, 4, st.Recommended)
	// A drained, idle topic needs one replica.
	var idle lagTracker
	st = idle.observe(t0, map[string]map[int32]int64{"t": {0: 0, 1: 0}}, 10, 2, 0, time.Minute)
	require.Equal(t, 1, st.Recommended)
}
