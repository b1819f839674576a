package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// simulate is a window of length at rate changes/s through a pipeline that
// takes base per change and applies at most one change per service time,
// in order: with service longer than 1/rate, its queue grows. Watching
// stops settle after the window.
func simulate(rate float64, base, service, length, settle time.Duration) window {
	from := time.Unix(1_000_000, 0)
	w := window{from: from, length: length, stop: from.Add(length + settle)}
	interval := time.Duration(float64(time.Second) / rate)
	var free time.Time
	for c := from; c.Before(from.Add(length)); c = c.Add(interval) {
		done := c.Add(base)
		if next := free.Add(service); next.After(done) {
			done = next
		}
		free = done
		w.committed = append(w.committed, c)
		if !done.After(w.stop) {
			w.at = append(w.at, c)
			w.lat = append(w.lat, done.Sub(c))
		}
	}
	return w
}

// appliedBy is what run reports as applied: the window's changes applied
// by 2 s after it, per second of the window.
func appliedBy(w window) float64 {
	n := 0
	for i, t := range w.at {
		if !t.Add(w.lat[i]).After(w.from.Add(w.length + 2*time.Second)) {
			n++
		}
	}
	return float64(n) / w.length.Seconds()
}

// TestSteadyGrowingQueue: a pipeline 4% slower than the offered rate
// applies every change of a 30 s window within 2 s of its end, so
// applied ÷ offered alone (the former rule) calls the rate sustained, but
// its queue grows: freshness rises from 0.3 s to 1.5 s over the window,
// the last third's p50 is more than 1.5× the first's, and it is not.
func TestSteadyGrowingQueue(t *testing.T) {
	w := simulate(100, 300*time.Millisecond, time.Second/96, 30*time.Second, 2*time.Second)
	applied := appliedBy(w)
	require.GreaterOrEqual(t, applied, 0.95*100, "the former rule, applied ≥ 0.95 × offered, accepts it")

	s := w.stats()
	require.Zero(t, s.censored)
	require.InDelta(t, 510*time.Millisecond, s.first, float64(5*time.Millisecond), "p50 of changes 0-999: change 500, 300 ms + 500 × 0.42 ms")
	require.InDelta(t, 1340*time.Millisecond, s.last, float64(5*time.Millisecond), "p50 of changes 2000-2999: change 2500")
	require.Greater(t, s.growth, 1.5)

	ok, why := steady(100, applied, s, 0.95, 1.5)
	require.False(t, ok)
	require.Contains(t, why, "queue grows")
	require.NotContains(t, why, "applied", "the applied criterion holds")
}

// TestSteadyFlat: a pipeline with room to spare keeps freshness flat and
// the rate is sustained.
func TestSteadyFlat(t *testing.T) {
	w := simulate(100, 300*time.Millisecond, time.Second/110, 30*time.Second, 2*time.Second)
	s := w.stats()
	require.Equal(t, windowStats{p50: 300 * time.Millisecond, p95: 300 * time.Millisecond, p99: 300 * time.Millisecond,
		first: 300 * time.Millisecond, last: 300 * time.Millisecond, growth: 1}, s)
	ok, why := steady(100, appliedBy(w), s, 0.95, 1.5)
	require.True(t, ok, why)
}

// TestWindowStatsQueuedCount: a change still queued when watching stops
// counts at stop minus the end of its third, a lower bound. Left out, the
// last third would keep only its fastest changes and hide the queue.
func TestWindowStatsQueuedCount(t *testing.T) {
	from := time.Unix(1_000_000, 0)
	ms := time.Millisecond
	w := window{from: from, length: 3 * time.Second, stop: from.Add(8 * time.Second)}
	// First third: three changes applied at 100 ms.
	for i := range 3 {
		w.committed = append(w.committed, from.Add(time.Duration(i)*100*ms))
		w.at = append(w.at, from.Add(time.Duration(i)*100*ms))
		w.lat = append(w.lat, 100*ms)
	}
	// Last third: two applied at 100 ms, three still queued at stop,
	// 5 s after the window's end.
	for i := range 5 {
		c := from.Add(2*time.Second + time.Duration(i)*100*ms)
		w.committed = append(w.committed, c)
		if i < 2 {
			w.at = append(w.at, c)
			w.lat = append(w.lat, 100*ms)
		}
	}
	s := w.stats()
	require.Equal(t, 3, s.censored)
	require.Equal(t, 100*ms, s.first)
	require.Equal(t, 5*time.Second, s.last, "3 of the last third's 5 changes count at ≥ 5 s")
	require.InDelta(t, 50, s.growth, 1e-9)
	require.Equal(t, 5*time.Second, s.p99)
}

// TestWindowStatsWarmUpLeftOut: changes committed before the window (the
// warm-up) count in no third and no quantile.
func TestWindowStatsWarmUpLeftOut(t *testing.T) {
	from := time.Unix(1_000_000, 0)
	w := window{from: from, length: 3 * time.Second, stop: from.Add(5 * time.Second)}
	add := func(c time.Time, lat time.Duration) {
		w.committed = append(w.committed, c)
		w.at = append(w.at, c)
		w.lat = append(w.lat, lat)
	}
	add(from.Add(-500*time.Millisecond), 9*time.Second) // warm-up
	add(from, 200*time.Millisecond)
	add(from.Add(2500*time.Millisecond), 200*time.Millisecond)
	s := w.stats()
	require.Equal(t, windowStats{p50: 200 * time.Millisecond, p95: 200 * time.Millisecond, p99: 200 * time.Millisecond,
		first: 200 * time.Millisecond, last: 200 * time.Millisecond, growth: 1}, s)
}

// TestSteady: each criterion alone fails a rate, and says so; the limits
// themselves pass.
func TestSteady(t *testing.T) {
	ms := time.Millisecond
	stats := func(first, last time.Duration) windowStats {
		s := windowStats{first: first, last: last}
		if first > 0 {
			s.growth = float64(last) / float64(first)
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		applied float64
		s       windowStats
		want    bool
		why     []string
	}{
		{name: "both hold", applied: 100, s: stats(300*ms, 310*ms), want: true},
		{name: "at both limits", applied: 95, s: stats(200*ms, 300*ms), want: true},
		{name: "applied short", applied: 94, s: stats(300*ms, 300*ms), why: []string{"applied 0.94 < 0.95 of offered"}},
		{name: "queue grows", applied: 100, s: stats(200*ms, 301*ms), why: []string{"queue grows: last third's p50 1.50× the first's > 1.50"}},
		{name: "both fail", applied: 80, s: stats(200*ms, 2*time.Second), why: []string{"applied 0.80", "queue grows"}},
		{name: "empty third", applied: 100, s: stats(0, 300*ms), why: []string{"a third without changes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := steady(100, tc.applied, tc.s, 0.95, 1.5)
			require.Equal(t, tc.want, ok, why)
			if tc.want {
				require.Empty(t, why)
			}
			for _, w := range tc.why {
				require.Contains(t, why, w)
			}
		})
	}
}
