package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// curveOptions drive -curve: the rates tried, from from, each factor times
// the last, until one is not sustained or up to limit.
//
// A rate is sustained when applied ≥ sustain × offered and the queue does
// not grow: the p50 freshness of the changes committed in the last third
// of the measured window is at most growth × that of the first third (see
// steady). The applied ratio alone admits a queue that grows slowly (a few
// percent of the offered rate), whose freshness rises for as long as the
// rate lasts.
type curveOptions struct {
	from, factor, limit float64
	sustain             float64 // applied ÷ offered a rate needs to count as sustained
	growth              float64 // the most the last third's p50 may be of the first's
	// drain > 0 first drains a backlog of that many changes (kafka only),
	// the like-for-like ceiling the highest rate is compared with.
	drain int
	// refine halves the interval between the highest rate sustained and
	// the first one not sustained this many times: with ×1.1 steps alone
	// the maximum found can sit up to 10% under the machine's.
	refine int
}

// curveRates returns the rates a curve tries, in order, up to limit.
func curveRates(c curveOptions) []float64 {
	var out []float64
	for r := c.from; r <= c.limit; r *= c.factor {
		out = append(out, math.Round(r))
		if c.factor <= 1 {
			break
		}
	}
	return out
}

// midRate is the whole rate halfway between lo, sustained, and hi, not
// sustained, or 0 when no rate lies between them (or none failed).
func midRate(lo, hi float64) float64 {
	mid := math.Round((lo + hi) / 2)
	if hi <= 0 || mid <= lo || mid >= hi {
		return 0
	}
	return mid
}

// measure runs one rate through src.
func measure(ctx context.Context, o options, src string, rate float64) (result, error) {
	if src == "postgres" {
		return runServe(ctx, o, rate)
	}
	return run(ctx, o, src, rate, 0)
}

// curveHeader is the head of runCurve's table.
const curveHeader = "| offered/s | applied/s | applied ÷ offered | p50 first third | p50 last third | last ÷ first | p50 | p99 | chunk rows/s | sustained |\n" +
	"|---|---|---|---|---|---|---|---|---|---|"

// curveRow is r as a row of runCurve's table, with the verdict of steady.
// Quantiles that count changes still queued at a lower bound (see
// window.stats) are marked ≥.
func curveRow(r result, ok bool, why string) string {
	ge := ""
	if r.censored > 0 {
		ge = "≥ "
	}
	verdict := "yes"
	if !ok {
		verdict = "no: " + why
	}
	chunks := "—"
	if r.chunks > 0 {
		chunks = fmt.Sprintf("%.0f", r.chunks)
	}
	ratio := "—"
	if r.growth > 0 {
		ratio = fmt.Sprintf("%s%.2f", ge, r.growth)
	}
	return fmt.Sprintf("| %g | %.1f | %.2f | %d ms | %s%d ms | %s | %s%d ms | %s%d ms | %s | %s |", r.rate, r.applied, r.applied/r.rate,
		r.first.Milliseconds(), ge, r.last.Milliseconds(), ratio, ge, r.p50.Milliseconds(), ge, r.p99.Milliseconds(), chunks, verdict)
}

// runCurve measures src at rising rates until one is not sustained (see
// curveOptions), then halves the gap between the last rate sustained and
// that one c.refine times: the highest rate sustained is the machine's
// highest steady rate with these documents and provider latency. It then
// measures 80% of it, the rate the p99 target is stated at, and prints
// the curve with both criteria per rate.
func runCurve(ctx context.Context, o options, src string, c curveOptions) error {
	fmt.Printf("max-rate curve through %s: rates from %g/s, ×%g each, until one is not sustained (applied < %.2f × offered, or the last third's p50 > %.2f × the first's); %s per rate after a %s warm-up, provider latency %s\n",
		src, c.from, c.factor, c.sustain, c.growth, o.duration, o.warmup, o.latency)
	var drained result
	if c.drain > 0 {
		if src != "kafka" {
			return fmt.Errorf("-curve-drain: only through kafka")
		}
		var err error
		if drained, err = run(ctx, o, src, 0, c.drain); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		fmt.Printf("%s: a backlog of %d of these changes drained at %.1f changes/s (%.0f chunk rows/s, %.2f rows per change)\n",
			src, c.drain, drained.applied, drained.chunks, drained.chunks/drained.applied)
	}
	fmt.Println(curveHeader)
	best, failed := 0.0, 0.0
	var bestRes result
	// try measures rate and moves best or failed to it.
	try := func(rate float64) (sustained bool, err error) {
		r, err := measure(ctx, o, src, rate)
		if err != nil {
			return false, fmt.Errorf("rate %g: %w", rate, err)
		}
		ok, why := steady(rate, r.applied, windowStats{first: r.first, last: r.last, growth: r.growth}, c.sustain, c.growth)
		fmt.Println(curveRow(r, ok, why))
		if !ok {
			failed = rate
			return false, nil
		}
		best, bestRes = rate, r
		return true, nil
	}
	for _, rate := range curveRates(c) {
		if ok, err := try(rate); err != nil {
			return err
		} else if !ok {
			break
		}
	}
	if best == 0 {
		fmt.Printf("%s: not even %g/s was sustained\n", src, c.from)
		return nil
	}
	for range c.refine {
		rate := midRate(best, failed)
		if rate == 0 {
			break
		}
		if _, err := try(rate); err != nil {
			return err
		}
	}
	at80 := math.Round(0.8*best*10) / 10
	r, err := measure(ctx, o, src, at80)
	if err != nil {
		return fmt.Errorf("rate %g (80%% of the maximum): %w", at80, err)
	}
	ok, why := steady(at80, r.applied, windowStats{first: r.first, last: r.last, growth: r.growth}, c.sustain, c.growth)
	fmt.Println(curveRow(r, ok, why))
	fmt.Printf("%s: highest steady rate %g changes/s (applied %.1f/s, last ÷ first third p50 %.2f, p99 %s); at 80%% of it, %g/s: p50 %s, p99 %s, applied %.2f of offered, steady: %v (target: p99 ≤ 1 s)\n",
		src, best, bestRes.applied, bestRes.growth, bestRes.p99.Round(time.Millisecond), at80, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.applied/at80, ok)
	if c.drain > 0 {
		fmt.Printf("%s: highest steady rate ÷ the same changes drained as a backlog (like for like): %.2f (%g ÷ %.1f; target ≥ 0.9)\n", src, best/drained.applied, best, drained.applied)
	}
	return nil
}
