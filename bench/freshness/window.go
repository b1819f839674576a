package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// window is what one rate's measured window saw: the changes committed in
// it and, of those, the ones applied and their freshness. Changes committed
// during the warm-up are not in it.
type window struct {
	from   time.Time     // start of the measured window (the warm-up ends)
	length time.Duration // its length
	// committed holds the commit time of every change committed in the
	// window, as the driver committed it.
	committed []time.Time
	// at and lat hold, for every change committed in the window and applied
	// by stop, its commit time and its freshness.
	at  []time.Time
	lat []time.Duration
	// stop is when watching for the window's changes ended: a change not
	// applied by then is still queued, and its freshness is at least
	// stop minus its commit time.
	stop time.Time
}

// windowStats are a window's freshness quantiles over all its changes and
// the medians of its first and last thirds by commit time.
type windowStats struct {
	p50, p95, p99 time.Duration
	// first and last are the p50s of the changes committed in the first
	// and in the last third of the window; growth is last ÷ first (0 when
	// either third is empty).
	first, last time.Duration
	growth      float64
	// censored counts the changes not applied by the window's stop: each
	// counts at a lower bound of its freshness (see window.stats), so the
	// quantiles are lower bounds when it is not 0.
	censored int
}

// stats computes w's quantiles and thirds. A change still queued at stop
// counts with stop minus the end of its third, a lower bound of its
// freshness: leaving it out would drop exactly the slowest changes of a
// growing queue, and the last third's median would hide the growth.
// Changes are matched to thirds by commit time only (a change still queued
// is known by its third's count, not by which change it is). Changes
// committed outside the window (the warm-up) are left out.
func (w window) stats() windowStats {
	third := w.length / 3
	// idx is the third t falls in, or -1 outside the window.
	idx := func(t time.Time) int {
		if t.Before(w.from) || !t.Before(w.from.Add(w.length)) {
			return -1
		}
		return min(int(t.Sub(w.from)/third), 2)
	}
	var lats [3][]time.Duration
	var all []time.Duration
	for i, t := range w.at {
		if k := idx(t); k >= 0 {
			lats[k] = append(lats[k], w.lat[i])
			all = append(all, w.lat[i])
		}
	}
	var committed [3]int
	for _, t := range w.committed {
		if k := idx(t); k >= 0 {
			committed[k]++
		}
	}
	var s windowStats
	for k := range 3 {
		end := w.from.Add(time.Duration(k+1) * third)
		if k == 2 {
			end = w.from.Add(w.length)
		}
		bound := max(w.stop.Sub(end), 0)
		for range committed[k] - len(lats[k]) {
			lats[k] = append(lats[k], bound)
			all = append(all, bound)
			s.censored++
		}
	}
	if len(all) == 0 {
		return s
	}
	s.p50, s.p95, s.p99 = quantiles(all)
	if len(lats[0]) > 0 && len(lats[2]) > 0 {
		s.first, _, _ = quantiles(lats[0])
		s.last, _, _ = quantiles(lats[2])
		if s.first > 0 {
			s.growth = float64(s.last) / float64(s.first)
		}
	}
	return s
}

// steady judges a rate: it is sustained when the applied rate is at least
// sustain × offered and the queue does not grow, the p50 of the last
// third at most growth × that of the first. When not, why says why
// (every criterion that failed).
func steady(offered, applied float64, s windowStats, sustain, growth float64) (ok bool, why string) {
	var not []string
	if applied < sustain*offered {
		not = append(not, fmt.Sprintf("applied %.2f < %.2f of offered", applied/offered, sustain))
	}
	switch {
	case s.first <= 0 || s.last <= 0:
		not = append(not, "a third without changes")
	case s.growth > growth:
		not = append(not, fmt.Sprintf("queue grows: last third's p50 %.2f× the first's > %.2f", s.growth, growth))
	}
	if len(not) == 0 {
		return true, ""
	}
	return false, strings.Join(not, "; ")
}

// quantiles returns p50, p95 and p99 of lat (sorted in place): exact, the
// smallest value at or above each share.
func quantiles(lat []time.Duration) (p50, p95, p99 time.Duration) {
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(math.Ceil(f*float64(len(lat))))-1)] }
	return q(0.50), q(0.95), q(0.99)
}
