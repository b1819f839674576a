package monitor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// stationary draws n unit vectors of one fixed anisotropic distribution.
func stationary(rng *rand.Rand, n, dims int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		v := make([]float32, dims)
		var norm float64
		for j := range v {
			x := rng.NormFloat64() / float64(1+j/4) // a few strong directions
			if j == 0 {
				x += 3
			}
			v[j] = float32(x)
			norm += x * x
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(norm))
		}
		out[i] = v
	}
	return out
}

// On stationary data no drift signal claims an alarm: exceeded=true is the
// alarm state and nothing else. The second half adds a shift too small to
// matter (PSI far under PSINoticeable) that KS, with 2,000 vectors a side,
// calls significant at every check: it stays a detail.
func TestDriftSignalsOnStationaryDataNeverExceed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		shift float32
	}{{"stationary", 0}, {"negligible shift", 0.05}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(7, 7))
			d := NewDrift(testRef, testCur, 3)
			d.Observe(stationary(rng, testRef, 48)...)
			checks, ksBelow := 0, 0
			for range 12 {
				vs := stationary(rng, 2*checkEvery, 48)
				for _, v := range vs {
					v[1] += tc.shift
				}
				d.Observe(vs...)
				r := d.Check()
				if !r.Ready {
					continue
				}
				require.False(t, r.Alarm, "%+v", r)
				require.Less(t, r.PSIMax, PSINoticeable)
				checks++
				if r.KSPCorrected < KSAlpha {
					ksBelow++
				}
				for _, s := range driftSignals(TagDrift, r) {
					require.False(t, s.sig.Exceeded, "%s exceeded: score %g", s.sig.Method, s.sig.Score)
				}
				for _, s := range corpusSignals(r) {
					require.False(t, s.sig.Exceeded, "%s exceeded", s.sig.Method)
				}
			}
			require.Positive(t, checks)
			t.Logf("%s: %d checks, KS p (corrected) under %.2f at %d of them, no signal exceeded", tc.name, checks, KSAlpha, ksBelow)
			if tc.shift > 0 {
				require.Positive(t, ksBelow, "KS must find the negligible shift for this case to test anything")
			}
		})
	}
}

// A real shift still raises the alarm, on psi_max, and only there.
func TestDriftAlarmIsOnPSIOnly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(8, 8))
	d := NewDrift(testRef, testCur, 3)
	d.Observe(stationary(rng, testRef, 48)...)
	shifted := stationary(rng, testCur, 48)
	for _, v := range shifted {
		v[0], v[1] = v[1], v[0] // the strong direction moves
	}
	d.Observe(shifted...)
	r := d.Check()
	require.True(t, r.Alarm, "%+v", r)
	exceeded := map[string]bool{}
	for _, s := range driftSignals(TagDrift, r) {
		exceeded[s.sig.Method] = s.sig.Exceeded
	}
	require.Equal(t, map[string]bool{"psi_max": true, "ks_p_bonferroni": false, "centroid_cosine": false}, exceeded)
}
