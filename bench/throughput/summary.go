package main

import (
	"fmt"
	"slices"
	"time"
)

// summarise prints, per binary and latency, the medians over rounds of
// what the targets are about, and the ratios between them.
func summarise(results []result, latencies []time.Duration) {
	type key struct {
		name    string
		latency time.Duration
	}
	med := func(k key, f func(result) float64) float64 {
		var xs []float64
		for _, r := range results {
			if r.name == k.name && r.latency == k.latency {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	names := []string{}
	for _, r := range results {
		if !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
	}
	fmt.Println("medians over rounds:")
	for _, n := range names {
		for _, l := range latencies {
			k := key{n, l}
			fmt.Printf("  %s %s: chunks/s ÷ raw %.2f, CPU %.3f ms/chunk, PG CPU %.3f ms/chunk (raw's %.3f ms/row), bench CPU %.3f ms/chunk, 1/%.1f requests per input\n",
				n, l, med(k, result.ofRaw), med(k, func(r result) float64 { return r.perChunkMs(r.cpu) }),
				med(k, func(r result) float64 { return r.perChunkMs(r.pgCPU) }),
				med(k, func(r result) float64 { return float64(r.raw.pgCPU) / float64(time.Millisecond) / float64(r.raw.rows) }),
				med(k, func(r result) float64 { return r.perChunkMs(r.benchCPU) }),
				med(k, result.inputsPerRequest))
		}
		// On a machine where serve, the test embedding server and
		// Postgres share the cores, the CPU they spend per chunk bounds
		// the ratio to the raw limit (whose client does almost nothing):
		// at best raw's PG CPU per row over everyone's CPU per chunk.
		k0 := key{n, latencies[0]}
		rawPG := med(k0, func(r result) float64 { return float64(r.raw.pgCPU) / float64(time.Millisecond) / float64(r.raw.rows) })
		pg := med(k0, func(r result) float64 { return r.perChunkMs(r.pgCPU) })
		own := med(k0, func(r result) float64 { return r.perChunkMs(r.cpu) })
		bench := med(k0, func(r result) float64 { return r.perChunkMs(r.benchCPU) })
		fmt.Printf("  %s %s: CPU-budget ceiling of ÷ raw on this machine %.2f (%.2f if serve used no CPU; Postgres spends %.2f× raw's CPU per row)\n",
			n, latencies[0], rawPG/(pg+own+bench), rawPG/(pg+bench), pg/rawPG)
		if len(latencies) > 1 {
			fmt.Printf("  %s: chunks/s at %s ÷ at %s = %.2f\n", n, latencies[len(latencies)-1], latencies[0],
				med(key{n, latencies[len(latencies)-1]}, result.chunksPerSec)/med(key{n, latencies[0]}, result.chunksPerSec))
		}
	}
	if len(names) == 2 {
		for _, l := range latencies {
			b, n := key{names[0], l}, key{names[1], l}
			cpu := func(r result) float64 { return r.perChunkMs(r.cpu) }
			fmt.Printf("  %s ÷ %s at %s: chunks/s %.2f, CPU ms/chunk %.2f\n", names[1], names[0], l,
				med(n, result.chunksPerSec)/med(b, result.chunksPerSec), med(n, cpu)/med(b, cpu))
		}
	}
}
