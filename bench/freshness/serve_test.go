package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHistogramQuantile: quantiles of cumulative bucket counts are
// interpolated as Prometheus' histogram_quantile does.
func TestHistogramQuantile(t *testing.T) {
	les := []float64{0.1, 0.2, 0.5, math.Inf(1)}
	counts := []float64{10, 30, 40, 40}                                   // 10 in (0,0.1], 20 in (0.1,0.2], 10 in (0.2,0.5]
	require.InDelta(t, 0.15, histogramQuantile(0.5, les, counts), 1e-9)   // rank 20: halfway through the second bucket
	require.InDelta(t, 0.05, histogramQuantile(0.125, les, counts), 1e-9) // rank 5: halfway through the first
	require.InDelta(t, 0.488, histogramQuantile(0.99, les, counts), 1e-9) // rank 39.6: 0.2 + 0.3*9.6/10
	// Past the last finite bound: that bound.
	require.InDelta(t, 0.5, histogramQuantile(0.99, les, []float64{0, 0, 1, 10}), 1e-9)
}

// TestCurveRates: the curve's rates rise by the factor up to the limit.
func TestCurveRates(t *testing.T) {
	require.Equal(t, []float64{25, 38, 56, 84, 127, 190}, curveRates(curveOptions{from: 25, factor: 1.5, limit: 200}))
	require.Equal(t, []float64{10}, curveRates(curveOptions{from: 10, factor: 2, limit: 10}))
}

// TestMidRate: refinement tries whole rates strictly between the last rate
// sustained and the first not, and stops when none is left or none failed.
func TestMidRate(t *testing.T) {
	require.Equal(t, 315.0, midRate(300, 330))
	require.Equal(t, 323.0, midRate(315, 330))
	require.Equal(t, 0.0, midRate(300, 301), "no whole rate between")
	require.Equal(t, 0.0, midRate(300, 0), "no rate failed: nothing to refine")
}
