package monitor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The figures these tests log come from the offline hashing embedder: they
// compare chunkings and wording, not what a real model would see.

// The defaults of monitor.reference_size and monitor.window_size: the
// smallest sizes that keep the sampling distortion ε ≤ 0.02
// (TestSamplingDistortion).
const (
	testRef, testCur = 2000, 2000
	checkEvery       = 100 // chunks between checks
)

// TestDriftDomainShift builds the reference from edits-C (kubernetes/
// community) chunks and then streams edits-A (tldr pages): the alarm must
// fire, and the test reports after how many edits-A chunks.
func TestDriftDomainShift(t *testing.T) {
	t.Parallel()
	_, c := sharedChunks(t, "edits-C", 6000)
	_, a := sharedChunks(t, "edits-A", 4000)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })

	d := NewDrift(testRef, testCur, 3)
	d.Observe(c[:testRef+testCur]...)
	before := d.Check()
	require.True(t, before.Ready)
	require.False(t, before.Alarm, "no alarm before the shift: %+v", before)

	delay := -1
	for n := checkEvery; n <= len(a); n += checkEvery {
		d.Observe(a[n-checkEvery : n]...)
		if r := d.Check(); r.Alarm {
			delay = n
			t.Logf("alarm after %d edits-A chunks (current window %d): PSI max %.3f, KS p corrected %.2g, centroid cosine %.3f",
				n, testCur, r.PSIMax, r.KSPCorrected, r.CentroidCosine)
			break
		}
	}
	require.Positive(t, delay, "the domain shift never raised the alarm")
	require.LessOrEqual(t, delay, testCur, "detection took longer than one current window")
}

// TestDriftStationary streams random splits of one corpus: the reference
// is one part, the rest is the stream, checked every checkEvery chunks.
// Over at least 20 disjoint current windows (several splits of edits-C and
// edits-A) there must be no alarm; the test reports the false-alarm rate
// over every check.
func TestDriftStationary(t *testing.T) {
	t.Parallel()
	totalWindows, totalChecks := 0, 0
	ksAlone := 0
	for _, set := range []string{"edits-C", "edits-A"} {
		_, all := sharedChunks(t, set, 20000)
		splits := map[string]int{"edits-C": 1, "edits-A": 3}[set]
		for split := range splits {
			c := append([][]float32(nil), all...)
			rng := rand.New(rand.NewPCG(3, uint64(split)))
			rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
			d := NewDrift(testRef, testCur, 3)
			d.Observe(c[:testRef]...)
			checks, alarms, worstPSI, worstP := 0, 0, 0.0, 1.0
			const step = 2 * checkEvery
			for n := testRef + step; n <= len(c); n += step {
				d.Observe(c[n-step : n]...)
				r := d.Check()
				if !r.Ready {
					continue
				}
				checks++
				if r.KSPCorrected < KSAlpha {
					ksAlone++
				}
				// exceeded is the alarm state: no signal claims one here,
				// though KS alone finds a difference at some checks.
				for _, s := range driftSignals(TagDrift, r) {
					require.False(t, s.sig.Exceeded, "%s exceeded on stationary data (score %g)", s.sig.Method, s.sig.Score)
				}
				if r.Alarm {
					alarms++
				}
				worstPSI, worstP = math.Max(worstPSI, r.PSIMax), math.Min(worstP, r.KSPCorrected)
			}
			windows := (len(c) - testRef) / testCur
			totalWindows, totalChecks = totalWindows+windows, totalChecks+checks
			t.Logf("%s split %d (%d chunks): %d checks, %d disjoint windows of %d, %d alarms; worst PSI %.3f, smallest corrected KS p %.3f",
				set, split, len(c), checks, windows, testCur, alarms, worstPSI, worstP)
			require.Zero(t, alarms)
		}
	}
	t.Logf("stationary: 0 alarms in %d checks over %d disjoint windows (false-alarm rate 0/%d); KS alone would have fired at %d checks",
		totalChecks, totalWindows, totalChecks, ksAlone)
	require.GreaterOrEqual(t, totalWindows, 20, "too few disjoint windows to speak of a false-alarm rate")
}
