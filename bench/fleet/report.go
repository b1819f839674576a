package main

import (
	"fmt"
	"math"
	"time"
)

// report prints the run's figures as a markdown table.
func report(o options, r results) {
	R, T := float64(o.rpm), float64(o.tpm)
	pct := func(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }
	fmt.Printf("\n### Fleet: %d `serve` replicas (%d partitions) + 1 `backfill`, one shared budget\n\n", o.replicas, o.partitions)
	fmt.Printf("R = %d requests/min, T = %s, enforced over %s; provider latency %s; live %.1f changes/s; backfill %d rows; windows of %s after %s.\n\n",
		o.rpm, tokensLimit(o.tpm), o.quantum, o.latency, o.liveRate, r.backfillRows, o.window, o.warm)
	fmt.Println("| measure | figure | target |")
	fmt.Println("|---|---|---|")
	cut := ""
	if r.windowCut {
		cut = fmt.Sprintf(" (the backfill ended %.0fs into the window: raise -backfill-rows)", r.mixed.seconds)
	}
	fmt.Printf("| accepted requests/min over the steady window (live + backfill) ÷ R | %.3f (%d in %.0fs)%s | 1 ± 0.02 |\n",
		r.mixed.perMinute()/R, r.mixed.accepted, r.mixed.seconds, cut)
	if o.tpm > 0 {
		fmt.Printf("| accepted tokens/min over the steady window ÷ T | %.3f | 1 ± 0.02 when tokens bind |\n", r.mixed.tokensPerMinute()/T)
	}
	fmt.Printf("| 429s ÷ requests, steady window | %s (%d of %d) | ≤ 1%% |\n", pct(r.mixed.throttledShare()), r.mixed.throttled, r.mixed.accepted+r.mixed.throttled)
	fmt.Printf("| 429s ÷ requests, whole run | %s (%d of %d) | ≤ 1%% |\n", pct(r.whole.throttledShare()), r.whole.throttled, r.whole.accepted+r.whole.throttled)
	fmt.Printf("| live changes produced / applied by the fleet / redelivered and skipped | %d / %.0f / %.0f | applied = produced |\n", r.produced, r.applied, r.duplicates)
	c := r.cmp
	fmt.Printf("| index vs a fresh load of the final state: documents, chunks | %d / %d vs %d / %d | equal |\n", c.documents, c.chunks, c.freshDocuments, c.freshChunks)
	fmt.Printf("| documents, chunks, vectors differing; chunks doubled | %d, %d, %d; %d | 0 |\n", c.docsDiffer, c.chunksDiffer, c.vectorsDiffer, c.doubled)
	fmt.Printf("| live lane's requests without backfill ÷ R | %.3f | ≤ 0.5 (the live rate uses half the budget) |\n", r.live.perMinute()/R)
	if o.tpm > 0 {
		fmt.Printf("| live lane's tokens without backfill ÷ T | %.3f | ≤ 0.5 |\n", r.live.tokensPerMinute()/T)
	}
	fmt.Printf("| live lane's mean wait for the budget per request, without / with backfill | %s / %s | the backfill never holds live back |\n",
		r.waitLive.Round(time.Microsecond), r.waitMix.Round(time.Microsecond))
	fmt.Printf("| live freshness p99 without backfill | %.3fs (%.0f changes) | |\n", r.p99Live, r.nLive)
	fmt.Printf("| live freshness p99 with backfill | %.3fs (%.0f changes) | |\n", r.p99Mix, r.nMix)
	ratio := math.NaN()
	if r.p99Live > 0 {
		ratio = r.p99Mix / r.p99Live
	}
	fmt.Printf("| live freshness p99 with backfill ÷ without | %.2f | ≤ 1.2 |\n", ratio)
	if r.control != nil {
		fmt.Printf("| control (no shared budget, each process R): accepted ÷ R | %.3f | |\n", r.control.perMinute()/R)
		fmt.Printf("| control: 429s ÷ requests, window / whole run | %s / %s (%d of %d) | the storm the budget replaces |\n",
			pct(r.control.throttledShare()), pct(r.controlWhole.throttledShare()), r.control.throttled, r.control.accepted+r.control.throttled)
	}
	fmt.Println()
}

func tokensLimit(tpm int) string {
	if tpm == 0 {
		return "no token limit"
	}
	return fmt.Sprintf("%d tokens/min", tpm)
}
