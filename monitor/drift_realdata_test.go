package monitor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The figures these tests log come from the offline hashing embedder: they
// compare chunkings and wording, not what a real model would see.

const (
	testRef, testCur = 1000, 500
	checkEvery       = 50 // chunks between checks: one "window" step
)

// TestDriftDomainShift builds the reference from edits-C (kubernetes/
// community) chunks and then streams edits-A (tldr pages): the alarm must
// fire, and the test reports after how many edits-A chunks.
func TestDriftDomainShift(t *testing.T) {
	_, c := sharedChunks(t, "edits-C", 3000)
	_, a := sharedChunks(t, "edits-A", 3000)
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

// TestDriftStationary streams a random split of one corpus: the reference
// is one part, the rest is the stream. Over at least 20 windows there must
// be no alarm; the test reports the false-alarm rate over every check.
func TestDriftStationary(t *testing.T) {
	totalWindows := 0
	for _, set := range []string{"edits-C", "edits-A"} {
		_, c := sharedChunks(t, set, 20000)
		rng := rand.New(rand.NewPCG(3, 4))
		rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
		d := NewDrift(testRef, testCur, 3)
		d.Observe(c[:testRef]...)
		checks, alarms, worstPSI, worstP := 0, 0, 0.0, 1.0
		for n := testRef + checkEvery; n <= len(c); n += checkEvery {
			d.Observe(c[n-checkEvery : n]...)
			r := d.Check()
			if !r.Ready {
				continue
			}
			checks++
			if r.Alarm {
				alarms++
			}
			worstPSI, worstP = math.Max(worstPSI, r.PSIMax), math.Min(worstP, r.KSPCorrected)
		}
		windows := (len(c) - testRef) / testCur
		t.Logf("%s: %d chunks", set, len(c))
		t.Logf("%s stationary: %d checks (%d disjoint windows of %d), %d alarms (false-alarm rate %.3f); worst PSI %.3f, smallest corrected KS p %.3f",
			set, checks, windows, testCur, alarms, float64(alarms)/float64(checks), worstPSI, worstP)
		totalWindows += windows
		require.Zero(t, alarms)
	}
	require.GreaterOrEqual(t, totalWindows, 20, "too few disjoint windows to speak of a false-alarm rate")
}
