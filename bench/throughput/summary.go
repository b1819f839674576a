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
			fmt.Printf("  %s %s: chunks/s ÷ raw %.2f, CPU %.3f ms/chunk, PG CPU %.3f ms/chunk (raw's %.3f ms/row), every Postgres process %.3f ms/chunk (raw's %.3f ms/row; ratio of each round: median %.2f), bench CPU %.3f ms/chunk, 1/%.1f requests per input\n",
				n, l, med(k, result.ofRaw), med(k, func(r result) float64 { return r.perChunkMs(r.cpu) }),
				med(k, func(r result) float64 { return r.perChunkMs(r.pgCPU) }),
				med(k, func(r result) float64 { return r.raw.perRowMs(r.raw.pgCPU) }),
				med(k, func(r result) float64 { return r.perChunkMs(r.pgAll) }),
				med(k, func(r result) float64 { return r.raw.perRowMs(r.raw.pgAll) }),
				med(k, func(r result) float64 { return r.perChunkMs(r.pgAll) / r.raw.perRowMs(r.raw.pgAll) }),
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
			fmt.Printf("  %s: chunks/s at %s ÷ at %s = %.2f (a slow provider should not cap throughput: target ≥ 0.9)\n", n, latencies[len(latencies)-1], latencies[0],
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

// printEdits prints, per binary, the medians of the edit runs that followed
// the loads: their CPU per document and as a share of the same round's load.
func printEdits(results []result, chars int) {
	names := []string{}
	for _, r := range results {
		if r.edit != nil && !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Println()
	what := fmt.Sprintf("%d characters changed in every document", chars)
	if chars == 0 {
		what = "every document's text unchanged, its status column changed"
	}
	fmt.Printf("edit runs (%s), medians over rounds:\n", what)
	fmt.Println("| binary | docs | CPU ms/doc | edit CPU ÷ load CPU | PG CPU ms/doc (backends) | PG backends ÷ load's per doc | PG CPU ms/doc (all) | PG all ÷ load's per doc | chunk rows written/doc | texts embedded/doc |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range names {
		var docs int64
		var cpu, share, pgB, pgBShare, pgA, pgShare, written, inputs []float64
		for _, r := range results {
			if r.name != n || r.edit == nil {
				continue
			}
			e := r.edit
			docs = e.docs
			cpu = append(cpu, e.perDocMs(e.cpu))
			share = append(share, r.editShare(e.cpu, r.cpu))
			pgB = append(pgB, e.perDocMs(e.pg.backends))
			pgBShare = append(pgBShare, r.editShare(e.pg.backends, r.pgCPU))
			pgA = append(pgA, e.perDocMs(e.pg.all))
			pgShare = append(pgShare, r.editShare(e.pg.all, r.pgAll))
			written = append(written, float64(e.written)/float64(e.docs))
			inputs = append(inputs, float64(e.inputs)/float64(e.docs))
		}
		fmt.Printf("| %s | %d | %.3f | %.2f | %.3f | %.2f | %.3f | %.2f | %.2f | %.2f |\n", n, docs, median(cpu), median(share),
			median(pgB), median(pgBShare), median(pgA), median(pgShare), median(written), median(inputs))
	}
}

// printSweep prints the edit sweep: per binary and document size, the
// medians of the load's and the edit's CPU, per document and per KB of
// document. Per KB, an edit path linear in the document (or better) stays
// flat or falls as documents grow.
func printSweep(results []result, sizes []int) {
	names := []string{}
	for _, r := range results {
		if !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
	}
	fmt.Println()
	fmt.Println("edit sweep by document size, medians over rounds:")
	fmt.Println("| binary | doc bytes | docs | load CPU ms/doc | edit CPU ms/doc | edit CPU µs/KB | edit ÷ load CPU | edit PG CPU ms/doc (all) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	perKB := map[string][]float64{}
	for _, n := range names {
		for _, size := range sizes {
			var docs int64
			var load, edit, kb, share, pg []float64
			for _, r := range results {
				if r.name != n || r.docBytes != size || r.edit == nil {
					continue
				}
				e := r.edit
				docs = e.docs
				load = append(load, float64(r.cpu)/float64(time.Millisecond)/float64(r.docs))
				edit = append(edit, e.perDocMs(e.cpu))
				kb = append(kb, e.perDocMs(e.cpu)*1000/(float64(size)/1024))
				share = append(share, r.editShare(e.cpu, r.cpu))
				pg = append(pg, e.perDocMs(e.pg.all))
			}
			perKB[n] = append(perKB[n], median(kb))
			fmt.Printf("| %s | %d | %d | %.3f | %.3f | %.1f | %.2f | %.3f |\n", n, size, docs, median(load), median(edit), median(kb), median(share), median(pg))
		}
	}
	if len(sizes) >= 2 {
		for _, n := range names {
			k := perKB[n]
			fmt.Printf("  %s: edit CPU per KB at %d B ÷ at %d B = %.2f (above 1: superlinear in the document's size)\n",
				n, sizes[len(sizes)-1], sizes[0], k[len(k)-1]/k[0])
		}
	}
}
