package monitor

import (
	"math/rand/v2"
	"slices"
	"sync"
)

// Drift thresholds follow the field's conventions.
const (
	// PSINoticeable is where a population shift is worth a look; an alarm
	// that is on goes off only below it (hysteresis).
	PSINoticeable = 0.1
	// PSIMajor is a major shift: the alarm goes on at or above it, when the
	// KS test confirms it.
	PSIMajor = 0.25
	// KSAlpha is the family-wise significance level of the KS tests
	// (Bonferroni-corrected over the projections).
	KSAlpha = 0.05
)

// window is a bounded set of vectors: either frozen once full (the
// reference: the first Cap vectors) or a ring of the last Cap (current).
type window struct {
	cap    int
	vecs   [][]float32
	seen   int64 // vectors offered
	next   int   // ring position of the next write
	frozen bool  // reference: stops at cap
}

func (w *window) add(v []float32) {
	w.seen++
	if len(w.vecs) < w.cap {
		w.vecs = append(w.vecs, v)
		return
	}
	if w.frozen {
		return
	}
	w.vecs[w.next] = v
	w.next = (w.next + 1) % w.cap
}

func (w *window) full() bool { return len(w.vecs) >= w.cap }

// DriftResult is one comparison of the current window with the reference.
type DriftResult struct {
	RefN, CurN int
	// Ready is false while either window has too few vectors to compare.
	Ready bool
	// CentroidCosine and CentroidEuclidean are the distances between the
	// windows' centroids.
	CentroidCosine, CentroidEuclidean float64
	// Projections names the 1-D series PSI and KS are computed on.
	Projections []string
	PSI         []float64
	KSD, KSP    []float64
	// PSIMax is the largest PSI over the projections; KSPCorrected the
	// smallest KS p-value times the number of projections (Bonferroni).
	PSIMax, KSPCorrected float64
	// Alarm is the hysteresis state after this check.
	Alarm bool
}

// Drift compares a reference window of vectors with a sliding current
// window. It is safe for concurrent use: Observe is called from the reader
// of new chunks (or the front door), Check from the monitor's loop.
type Drift struct {
	mu         sync.Mutex
	ref, cur   *window
	refFrom    *Drift // query drift compares against the corpus' reference
	components int
	minCur     int
	proj       *projector  // cached while the reference does not change
	projRef    int64       // len(ref.vecs) the projector was computed at
	refProj    [][]float64 // the reference projected by proj (read-only)
	alarm      bool
}

// NewDrift returns a Drift whose reference keeps the first refSize vectors
// and whose current window the last curSize; components is the number of
// principal directions projected on besides the centroid cosine.
func NewDrift(refSize, curSize, components int) *Drift {
	return &Drift{
		ref:        &window{cap: refSize, frozen: true},
		cur:        &window{cap: curSize},
		components: components,
		minCur:     max(curSize/2, 1),
	}
}

// NewQueryDrift returns a Drift whose current window holds front-door query
// vectors and whose reference is corpus's reference: "query distance",
// users asking about what the index lacks.
func NewQueryDrift(corpus *Drift, curSize int) *Drift {
	d := NewDrift(0, curSize, corpus.components)
	d.refFrom = corpus
	return d
}

// Observe offers vectors in arrival order: they fill the reference until it
// is full, and always enter the current window.
func (d *Drift) Observe(vs ...[]float32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range vs {
		if d.refFrom == nil && !d.ref.full() {
			d.ref.add(v)
			continue
		}
		d.cur.add(v)
	}
}

// Pin replaces the reference with vs (at most its capacity, sampled
// uniformly when there are more) and empties the current window: what
// `ragsync monitor reference --reset` does.
func (d *Drift) Pin(vs [][]float32, rng *rand.Rand) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(vs) > d.ref.cap {
		vs = slices.Clone(vs)
		rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
		vs = vs[:d.ref.cap]
	}
	d.ref = &window{cap: d.ref.cap, vecs: slices.Clone(vs), seen: int64(len(vs)), frozen: true}
	d.cur = &window{cap: d.cur.cap}
	d.proj, d.alarm = nil, false
}

// reference returns the reference vectors, a projector over them and
// their projections.
func (d *Drift) reference() ([][]float32, *projector, [][]float64) {
	if d.refFrom != nil {
		d.refFrom.mu.Lock()
		defer d.refFrom.mu.Unlock()
		return d.refFrom.reference()
	}
	// Keyed on the vectors held, not on seen: a full reference is frozen
	// while seen keeps counting, and recomputing its principal directions
	// at every check was a sixth of the check's CPU (bench/monitor). Pin
	// and restore drop the projector. The reference's projections are
	// kept with it: they were another sixth.
	if d.proj == nil || d.projRef != int64(len(d.ref.vecs)) {
		p := newProjector(d.ref.vecs, d.components)
		d.proj, d.projRef, d.refProj = &p, int64(len(d.ref.vecs)), p.project(d.ref.vecs)
	}
	return d.ref.vecs, d.proj, d.refProj
}

// Check compares the windows and updates the alarm: on when PSI reaches
// PSIMajor on some projection and the corrected KS p-value is below KSAlpha;
// off again only when PSI falls below PSINoticeable, so a score that
// hovers around one threshold does not flap.
func (d *Drift) Check() DriftResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	ref, proj, pr := d.reference()
	cur := slices.Clone(d.cur.vecs)
	r := DriftResult{RefN: len(ref), CurN: len(cur), Alarm: d.alarm, KSPCorrected: 1}
	if len(ref) < 2 || len(cur) < d.minCur {
		return r
	}
	r.Ready = true
	r.CentroidCosine, r.CentroidEuclidean = centroidDistances(proj.centroid, centroid(cur))
	r.Projections = proj.names()
	pc := proj.project(cur)
	for i := range pr {
		s := psi(pr[i], pc[i], 10)
		dd, p := ks(pr[i], pc[i])
		r.PSI, r.KSD, r.KSP = append(r.PSI, s), append(r.KSD, dd), append(r.KSP, p)
	}
	r.PSIMax = slices.Max(r.PSI)
	r.KSPCorrected = bonferroni(r.KSP)
	switch {
	case !d.alarm && r.PSIMax >= PSIMajor && r.KSPCorrected < KSAlpha:
		d.alarm = true
	case d.alarm && r.PSIMax < PSINoticeable:
		d.alarm = false
	}
	r.Alarm = d.alarm
	return r
}

// snapshot returns copies of the windows for persistence.
func (d *Drift) snapshot() (ref, cur window) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ref, cur = *d.ref, *d.cur
	ref.vecs, cur.vecs = slices.Clone(ref.vecs), slices.Clone(cur.vecs)
	return ref, cur
}

// restore loads persisted windows.
func (d *Drift) restore(ref, cur window) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ref.cap, ref.frozen = d.ref.cap, true
	cur.cap = d.cur.cap
	if len(ref.vecs) > ref.cap {
		ref.vecs = ref.vecs[:ref.cap]
	}
	if len(cur.vecs) > cur.cap {
		cur.vecs = cur.vecs[:cur.cap]
	}
	cur.next %= max(cur.cap, 1)
	d.ref, d.cur, d.proj = &ref, &cur, nil
}
