package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestP99: the quantile of what was observed between two scrapes,
// interpolated within its bucket; nothing observed is 0.
func TestP99(t *testing.T) {
	inf := math.Inf(1)
	a := scrape{fresh: map[float64]float64{0.1: 100, 0.5: 100, 1: 100, inf: 100}}
	// 100 more changes: 90 under 0.1s, 9 more under 0.5s, 1 under 1s.
	b := scrape{fresh: map[float64]float64{0.1: 190, 0.5: 199, 1: 200, inf: 200}}
	q, n := p99(a, b)
	require.InDelta(t, 100, n, 0)
	require.InDelta(t, 0.5, q, 1e-9, "the 99th change is the last under 0.5s")
	q, n = p99(b, b)
	require.Zero(t, q)
	require.Zero(t, n)
	// Past the last finite bound: that bound, as histogram_quantile says.
	c := scrape{fresh: map[float64]float64{0.1: 100, 0.5: 100, 1: 100, inf: 200}}
	q, _ = p99(a, c)
	require.InDelta(t, 1, q, 0)
}

// TestAdmissionsWindow: only what was judged in [from, to) counts, and
// tokens only of the accepted.
func TestAdmissionsWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	adm := []openaitest.Admission{
		{At: at(0), Tokens: 5},                   // before
		{At: at(1), Tokens: 10},                  // in
		{At: at(2), Tokens: 20, Throttled: true}, // in, throttled
		{At: at(30), Tokens: 30},                 // in
		{At: at(61), Tokens: 40},                 // at the end: out
	}
	a := admissions(adm, at(1), at(61))
	require.Equal(t, 2, a.accepted)
	require.Equal(t, 1, a.throttled)
	require.Equal(t, 40, a.tokens)
	require.InDelta(t, 2, a.perMinute(), 1e-9)
	require.InDelta(t, 40, a.tokensPerMinute(), 1e-9)
	require.InDelta(t, 1.0/3, a.throttledShare(), 1e-9)
}
