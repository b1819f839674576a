package monitor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSamplingDistortion measures ε = |score on the windows − score on the
// full populations| for the drift scores, with edits-C as the reference
// population and edits-A (shifted) or the rest of edits-C (stationary) as
// the current one, over 10 random draws per window size. The default sizes
// (reference 2000, window 2000) must keep ε ≤ 0.02 at the 95th percentile
// for the centroid distance, and for PSI where it decides (the stationary
// case: far past the threshold PSI's sampling error is large but never
// brings it under PSIMajor).
func TestSamplingDistortion(t *testing.T) {
	t.Parallel()
	_, c := sharedChunks(t, "edits-C", 6000)
	_, a := sharedChunks(t, "edits-A", 6000)
	rng := rand.New(rand.NewPCG(5, 6))
	rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	half := len(c) / 2
	cRef, cRest := c[:half], c[half:]

	scores := func(ref, cur [][]float32) (cent, psiMax float64) {
		p := newProjector(ref, 3)
		cent, _ = centroidDistances(p.centroid, centroid(cur))
		pr, pc := p.project(ref), p.project(cur)
		for i := range pr {
			psiMax = math.Max(psiMax, psi(pr[i], pc[i], 10))
		}
		return cent, psiMax
	}
	draw := func(vs [][]float32, n int) [][]float32 {
		idx := rng.Perm(len(vs))[:n]
		out := make([][]float32, n)
		for i, j := range idx {
			out[i] = vs[j]
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cur  [][]float32
	}{{"shifted (edits-A)", a}, {"stationary (edits-C)", cRest}} {
		fullCent, fullPSI := scores(cRef, tc.cur)
		for _, n := range [][2]int{{1000, 500}, {2000, 2000}} {
			var eCent, ePSI []float64
			for range 10 {
				sc, sp := scores(draw(cRef, n[0]), draw(tc.cur, n[1]))
				eCent, ePSI = append(eCent, math.Abs(sc-fullCent)), append(ePSI, math.Abs(sp-fullPSI))
			}
			slices.Sort(eCent)
			slices.Sort(ePSI)
			p95c, p95p := quantile(eCent, 0.95), quantile(ePSI, 0.95)
			t.Logf("%s ref %4d / cur %4d: full centroid %.4f PSI %.4f | ε p95 centroid %.4f, PSI %.4f",
				tc.name, n[0], n[1], fullCent, fullPSI, p95c, p95p)
			if n == [2]int{2000, 2000} {
				require.LessOrEqual(t, p95c, 0.02)
				if tc.cur[0][0] == cRest[0][0] && len(tc.cur) == len(cRest) {
					require.LessOrEqual(t, p95p, 0.02)
				} else {
					// Far past the threshold the exact PSI does not matter,
					// only that no draw changes the decision.
					require.GreaterOrEqual(t, fullPSI-p95p, PSIMajor)
				}
			}
		}
	}
}
