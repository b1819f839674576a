package main

import (
	"fmt"
	"io"
	"time"

	"github.com/ragsync/ragsync/sink"
)

func perChunk(bytes int64, r result) float64 { return float64(bytes) / float64(r.n) }

func (r result) tableBytes() float64 { return perChunk(r.size.heap+r.size.toast, r) }
func (r result) indexBytes() float64 { return perChunk(r.size.hnsw, r) }
func (r result) totalBytes() float64 { return r.tableBytes() + r.indexBytes() }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printDetail prints one run's breakdown as it finishes.
func printDetail(r result) {
	s := r.size
	fmt.Printf("  %s, %d dims (m %d, ef_construction %d): bytes/chunk: heap %.0f, TOAST %.0f, HNSW %.0f; other chunk indexes %.0f, documents %.0f, embedding cache %.0f (not in the table below); mean text %.0f B, vector column(s) %.0f B\n",
		r.typ, r.dims, r.hnsw.M, r.hnsw.EfConstruction, perChunk(s.heap, r), perChunk(s.toast, r), perChunk(s.hnsw, r),
		perChunk(s.otherChunkIdx, r), perChunk(s.documents, r), perChunk(s.cache, r), s.textBytes, s.vectorCols)
	fmt.Printf("  build %.1f s (COPY %.1f s, HNSW build %.1f s); %d online inserts at %.0f chunks/s (over the rounds)\n",
		r.buildSecs, r.copySecs, r.buildSecs-r.copySecs, r.inserted, r.insertRate)
	for _, q := range r.queries {
		fmt.Printf("  queries: ef_search %d%s: p50 %.2f ms, p99 %.2f ms (medians of %d rounds), recall@10 %.3f; %d of %d searches scanned the HNSW index%s\n",
			q.efSearch, candidatesNote(r, q), ms(q.p50), ms(q.p99), q.rounds, q.recall, q.indexed, q.n, exactNote(q))
	}
}

// exactNote explains searches that did not use the HNSW index.
func exactNote(q queryStats) string {
	if q.indexed == q.n {
		return ""
	}
	return " (the planner chose an exact scan for the others: at this size it prices a scan and sort below the index, so their latency and recall are not the index's)"
}

// mark flags a row whose searches were not all index scans.
func mark(q queryStats) string {
	if q.indexed == q.n {
		return ""
	}
	return " †"
}

func candidatesNote(r result, q queryStats) string {
	if r.typ != sink.TypeBit {
		return ""
	}
	// The sink raises a bit search's ef_search to its candidate count.
	return fmt.Sprintf(" (raised to the candidates), candidates %s", candidatesText(q))
}

func candidatesText(q queryStats) string {
	if q.defaulted {
		return fmt.Sprintf("%d (default)", q.candidates)
	}
	return fmt.Sprint(q.candidates)
}

// baseline is the vector type's run at r's dimensions, if there is one.
func baseline(rs []result, r result) (result, bool) {
	for _, b := range rs {
		if b.typ == sink.TypeVector && b.dims == r.dims && len(b.queries) > 0 {
			return b, true
		}
	}
	return result{}, false
}

func ratio(a, b float64, ok bool) string {
	if !ok || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// printTable prints the markdown table: a row per run and, for bit, per
// candidate count queried.
func printTable(w io.Writer, rs []result) {
	exact := false
	fmt.Fprintln(w, "| type | N | D | table B/chunk | index B/chunk | total ÷ vector | build s | insert chunks/s (÷ vector) | query p50 / p99 ms | recall@10 (÷ vector) | candidates |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		b, ok := baseline(rs, r)
		for _, q := range r.queries {
			cands := "–"
			if r.typ == sink.TypeBit {
				cands = candidatesText(q)
			}
			var bRecall float64
			if ok {
				bRecall = b.queries[0].recall
			}
			exact = exact || q.indexed != q.n
			fmt.Fprintf(w, "| %s | %d | %d | %.0f | %.0f | %s | %.1f | %.0f (%s) | %.2f / %.2f%s | %.3f (%s)%s | %s |\n",
				r.typ, r.n, r.dims, r.tableBytes(), r.indexBytes(), ratio(r.totalBytes(), b.totalBytes(), ok),
				r.buildSecs, r.insertRate, ratio(r.insertRate, b.insertRate, ok), ms(q.p50), ms(q.p99), mark(q),
				q.recall, ratio(q.recall, bRecall, ok), mark(q), cands)
		}
	}
	if exact {
		fmt.Fprintln(w, "\n† some searches ran as exact scans (the planner's choice at this size), not through the HNSW index: their latency and recall are not the index's; use a larger -n.")
	}
}

// printTargets checks the goals of each type against vector at the same
// dimensions: halfvec total bytes ≤ 0.55×, recall within 0.01, insert rate
// ≥ 1.0×; bit index bytes ≤ 0.1×, recall ≥ 0.95× and p99 ≤ 2× (per
// candidate count). It prints; a noisy shared machine decides nothing.
func printTargets(w io.Writer, rs []result) {
	check := func(r result, what string, got, goal string, pass bool) {
		verdict := "ok"
		if !pass {
			verdict = "MISS"
		}
		fmt.Fprintf(w, "target %s %d dims: %s %s (goal %s): %s\n", r.typ, r.dims, what, got, goal, verdict)
	}
	for _, r := range rs {
		b, ok := baseline(rs, r)
		if !ok || r.typ == sink.TypeVector {
			continue
		}
		bq := b.queries[0]
		switch r.typ {
		case sink.TypeHalfvec:
			// The goal is set at 1536 dimensions; below, the page steps of
			// the HNSW index fall elsewhere, so it is only shown.
			if t := r.totalBytes() / b.totalBytes(); r.dims >= 1536 {
				check(r, "total bytes ÷ vector", fmt.Sprintf("%.2f", t), "≤ 0.55", t <= 0.55)
			} else {
				fmt.Fprintf(w, "target %s %d dims: total bytes ÷ vector %.2f (the goal, ≤ 0.55, is at 1536 dims)\n", r.typ, r.dims, t)
			}
			q := r.queries[0]
			check(r, "recall@10 − vector's", fmt.Sprintf("%+.3f", q.recall-bq.recall), "≥ −0.01", q.recall >= bq.recall-0.01)
			ir := r.insertRate / b.insertRate
			check(r, "insert rate ÷ vector", fmt.Sprintf("%.2f", ir), "≥ 1.0", ir >= 1.0)
		case sink.TypeBit:
			t := r.indexBytes() / b.indexBytes()
			check(r, "index bytes ÷ vector", fmt.Sprintf("%.3f", t), "≤ 0.1", t <= 0.1)
			for _, q := range r.queries {
				rr := q.recall / bq.recall
				check(r, fmt.Sprintf("candidates %s: recall@10 ÷ vector", candidatesText(q)), fmt.Sprintf("%.3f", rr), "≥ 0.95", rr >= 0.95)
				pr := float64(q.p99) / float64(bq.p99)
				check(r, fmt.Sprintf("candidates %s: p99 ÷ vector", candidatesText(q)), fmt.Sprintf("%.2f", pr), "≤ 2", pr <= 2)
			}
		}
	}
}
