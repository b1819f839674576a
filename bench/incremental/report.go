package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
)

// usage is what the embedding test server counted.
type usage struct {
	Requests int64 `json:"requests"`
	Inputs   int64 `json:"inputs"`
	Tokens   int64 `json:"tokens"`
}

func (u usage) minus(o usage) usage {
	return usage{Requests: u.Requests - o.Requests, Inputs: u.Inputs - o.Inputs, Tokens: u.Tokens - o.Tokens}
}

// ragPhase is what ragsync did in one phase of the replay.
type ragPhase struct {
	Usage         usage
	ChunkSizes    []int // every chunk of every version written
	EmbeddedSizes []int // the chunks sent to the embedding API
	ByOp          map[string]*ragOpCounts
	Pipeline      pipeline.Snapshot
}

// sizes summarises a chunk-size distribution in tokens.
type sizes struct {
	Count  int `json:"count"`
	Median int `json:"median"`
	P95    int `json:"p95"`
}

func sizesOf(xs []int) sizes {
	return sizes{Count: len(xs), Median: percentile(xs, 0.5), P95: percentile(xs, 0.95)}
}

// phaseResult is one column of the report.
type phaseResult struct {
	Name     string `json:"name"`
	Versions int    `json:"versions"`
	Deletes  int    `json:"deletes"`

	Ragsync usage `json:"ragsync"`
	W       int   `json:"w_whole_document_tokens"`
	G       int   `json:"g_greedy_hash_tokens"`
	E       int   `json:"e_edit_floor_tokens"`
	// EAnywhere is E without paragraphs seen in any earlier version of any
	// document (see phase.EAnywhere).
	EAnywhere int `json:"e_anywhere_tokens"`
	// Token counting by this program over the texts ragsync sent; should
	// equal Ragsync.Tokens when the server counts cl100k_base tokens.
	RagsyncCounted int `json:"ragsync_tokens_counted_here"`

	RagsyncOverG         float64 `json:"ragsync_over_g"`
	RagsyncOverE         float64 `json:"ragsync_over_e"`
	RagsyncOverW         float64 `json:"ragsync_over_w"`
	RagsyncOverEAnywhere float64 `json:"ragsync_over_e_anywhere"`
	GOverW               float64 `json:"g_over_w"`
	EOverW               float64 `json:"e_over_w"`

	RagsyncChunks   sizes `json:"ragsync_chunk_tokens"`
	GChunks         sizes `json:"g_chunk_tokens"`
	RagsyncEmbedded sizes `json:"ragsync_embedded_chunk_tokens"`
	GEmbedded       sizes `json:"g_embedded_chunk_tokens"`

	// ByOp splits W, G and E by event op.
	ByOp map[string]*opCounts `json:"baselines_by_op"`
	// RagsyncByOp splits ragsync's tokens by event op, counted from the
	// chunks each version brought to the sink with a fresh vector (see
	// opSink); they sum to RagsyncCounted.
	RagsyncByOp map[string]*ragOpCounts `json:"ragsync_by_op"`

	Pipeline pipeline.Snapshot `json:"pipeline"`
}

func newPhaseResult(name string, r ragPhase, b phase) phaseResult {
	counted := 0
	for _, n := range r.EmbeddedSizes {
		counted += n
	}
	tok := float64(r.Usage.Tokens)
	return phaseResult{
		Name: name, Versions: b.Versions, Deletes: b.Deletes,
		Ragsync: r.Usage, W: b.W, G: b.G, E: b.E, EAnywhere: b.EAnywhere, RagsyncCounted: counted,
		RagsyncOverG: ratio(tok, b.G), RagsyncOverE: ratio(tok, b.E), RagsyncOverW: ratio(tok, b.W),
		RagsyncOverEAnywhere: ratio(tok, b.EAnywhere),
		GOverW:               ratio(float64(b.G), b.W), EOverW: ratio(float64(b.E), b.W),
		RagsyncChunks: sizesOf(r.ChunkSizes), GChunks: sizesOf(b.GChunkSizes),
		RagsyncEmbedded: sizesOf(r.EmbeddedSizes), GEmbedded: sizesOf(b.GEmbeddedSizes),
		ByOp:        b.ByOp,
		RagsyncByOp: r.ByOp,
		Pipeline:    r.Pipeline,
	}
}

func ratio(a float64, b int) float64 {
	if b == 0 {
		return 0
	}
	return a / float64(b)
}

// result is everything measured on one data set; it is written as
// results-<set>.json.
type result struct {
	Set           string         `json:"set"`
	Limit         int            `json:"limit"`
	Sample        float64        `json:"sample"`
	Events        int            `json:"events"`
	InitialEvents int            `json:"initial_events"`
	UpdateEvents  int            `json:"update_events"`
	Chunker       chunker.Config `json:"chunker"`
	Baseline      chunker.Config `json:"greedy_baseline_chunker"`
	Embedder      string         `json:"embedder"`
	Phases        [2]phaseResult `json:"phases"` // initial load, updates
	Recall        struct {
		Queries int     `json:"queries"`
		K       int     `json:"k"`
		Ragsync float64 `json:"ragsync"`
		Greedy  float64 `json:"greedy"`
	} `json:"recall"`
	Convergence comparison         `json:"convergence"`
	Seconds     map[string]float64 `json:"seconds"`
	// Debt is the reuse debt and its repayment in source time.
	Debt *debtResult `json:"debt"`
	// Schemas lists the schemas the run created (and dropped at its end).
	Schemas []string `json:"schemas"`
}

func (r *result) print(out io.Writer) {
	limit := ""
	if r.Sample > 0 && r.Sample < 1 {
		limit += fmt.Sprintf(", -sample %g of the documents", r.Sample)
	}
	if r.Limit > 0 {
		limit += fmt.Sprintf(", -limit %d", r.Limit)
	}
	refine := "refine off"
	if r.Chunker.RefineTargetTokens > 0 {
		refine = fmt.Sprintf("refine %d", r.Chunker.RefineTargetTokens)
	}
	fmt.Fprintf(out, "== %s: %d events (%d initial, %d updates%s); ragsync chunker %s target %d min %d max %d %s; G %s target %d min %d max %d; %s\n",
		r.Set, r.Events, r.InitialEvents, r.UpdateEvents, limit,
		r.Chunker.Strategy, r.Chunker.TargetTokens, r.Chunker.MinTokens, r.Chunker.MaxTokens, refine,
		r.Baseline.Strategy, r.Baseline.TargetTokens, r.Baseline.MinTokens, r.Baseline.MaxTokens, r.Embedder)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	ini, upd := r.Phases[0], r.Phases[1]
	row := func(name string, f func(p phaseResult) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, f(ini), f(upd))
	}
	num := func(f func(p phaseResult) int64) func(p phaseResult) string {
		return func(p phaseResult) string { return thousands(f(p)) }
	}
	rat := func(f func(p phaseResult) float64) func(p phaseResult) string {
		return func(p phaseResult) string { return fmt.Sprintf("%.3f", f(p)) }
	}
	sz := func(f func(p phaseResult) sizes) func(p phaseResult) string {
		return func(p phaseResult) string { s := f(p); return fmt.Sprintf("%d / %d", s.Median, s.P95) }
	}
	row("", func(p phaseResult) string { return p.Name })
	row("versions written (deletes)", func(p phaseResult) string { return fmt.Sprintf("%d (%d)", p.Versions, p.Deletes) })
	row("ragsync tokens embedded", num(func(p phaseResult) int64 { return p.Ragsync.Tokens }))
	row("  requests / inputs", func(p phaseResult) string { return fmt.Sprintf("%d / %d", p.Ragsync.Requests, p.Ragsync.Inputs) })
	row("W whole-document tokens", num(func(p phaseResult) int64 { return int64(p.W) }))
	row("G greedy+hash tokens", num(func(p phaseResult) int64 { return int64(p.G) }))
	row("E edit-floor tokens", num(func(p phaseResult) int64 { return int64(p.E) }))
	row("E* paragraphs new anywhere", num(func(p phaseResult) int64 { return int64(p.EAnywhere) }))
	row("ragsync / G", rat(func(p phaseResult) float64 { return p.RagsyncOverG }))
	row("ragsync / E", rat(func(p phaseResult) float64 { return p.RagsyncOverE }))
	row("ragsync / W", rat(func(p phaseResult) float64 { return p.RagsyncOverW }))
	row("ragsync / E*", rat(func(p phaseResult) float64 { return p.RagsyncOverEAnywhere }))
	row("G / W", rat(func(p phaseResult) float64 { return p.GOverW }))
	row("E / W", rat(func(p phaseResult) float64 { return p.EOverW }))
	row("chunk tokens median / p95: ragsync", sz(func(p phaseResult) sizes { return p.RagsyncChunks }))
	row("                            G", sz(func(p phaseResult) sizes { return p.GChunks }))
	row("embedded chunk tokens median / p95: ragsync", sz(func(p phaseResult) sizes { return p.RagsyncEmbedded }))
	row("                                     G", sz(func(p phaseResult) sizes { return p.GEmbedded }))
	_ = tw.Flush()
	printByOp(out, upd)
	fmt.Fprintf(out, "self-retrieval recall@%d over %d sentences of the final documents: ragsync %.3f, G %.3f (ragsync - G = %+.3f)\n",
		r.Recall.K, r.Recall.Queries, r.Recall.Ragsync, r.Recall.Greedy, r.Recall.Ragsync-r.Recall.Greedy)
	for i, p := range r.Phases {
		if int64(p.RagsyncCounted) != p.Ragsync.Tokens {
			fmt.Fprintf(out, "note (%s): the server counted %d tokens, this program counts %d in the texts sent\n", phaseNames[i], p.Ragsync.Tokens, p.RagsyncCounted)
		}
	}
	fmt.Fprintln(out, r.Convergence.String())
	if d := r.Debt; d != nil {
		u := upd.RagsyncByOp["u"]
		gu := 0
		if b := upd.ByOp["u"]; b != nil {
			gu = b.G
		}
		uTok := 0
		if u != nil {
			uTok = u.Tokens
		}
		fmt.Fprintf(out, "reuse debt (reuse %v, repayment %v, window %s in source time, %d segments): predictor slope %.2f after %d measured reuses\n",
			d.Reuse, d.Repay, d.Window, d.Segments, d.Slope, d.Measured)
		fmt.Fprintf(out, "  repaid %d vectors (%d from the cache) with %d tokens; oldest debt seen %.0fs; %d still in debt at the end of the replay\n",
			d.RepaidVectors, d.FromCache, d.RepayTokens, d.MaxDebtAgeSeconds, d.EndOutstanding)
		fmt.Fprintf(out, "  edits (u) incl. repayment: %d + %d = %d tokens = %.3f of G (%d); all updates incl. repayment %.3f of G\n",
			uTok, d.RepayTokens, uTok+d.RepayTokens, ratio(float64(uTok+d.RepayTokens), gu), gu,
			ratio(float64(upd.Ragsync.Tokens), upd.G))
		fmt.Fprintf(out, "  fidelity during the replay: %d checks of 64 uniform vectors, max share past %.2f = %.3f, alarms (share > 0.1): %d\n",
			d.Checks, monitor.DefaultCosineBound, d.MaxShareOver, d.Alarms)
		fmt.Fprintf(out, "  after the replay + one window: %d chunks, %d past the bound, max cosine %.4f, %d in debt; recall@5 before the final repayment %.3f\n",
			d.FinalChunks, d.FinalPastBound, d.FinalMaxCosine, d.FinalDebt, d.RecallBeforeRepay)
	}
	fmt.Fprintf(out, "time: total %.0fs (initial replay %.0fs, updates replay %.0fs, baselines %.0fs alongside, fresh load + compare %.0fs, recall %.0fs)\n",
		r.Seconds["total"], r.Seconds["replay_initial"], r.Seconds["replay_updates"], r.Seconds["baselines"],
		r.Seconds["fresh_load_and_compare"], r.Seconds["recall"])
}

// printByOp splits a phase's tokens by event op: u edits an existing
// document, c creates one (renames are d + c), so the note can say where
// the tokens go.
func printByOp(out io.Writer, p phaseResult) {
	fmt.Fprintf(out, "%s by op:\n", p.Name)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "op\tversions\tragsync\tG\tW\tE\tE*\tragsync / G\tragsync / E\treused chunks\t\n")
	var tot opCounts
	var rag ragOpCounts
	line := func(name string, b opCounts, r ragOpCounts) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%d\t\n", name, b.Versions,
			thousands(int64(r.Tokens)), thousands(int64(b.G)), thousands(int64(b.W)), thousands(int64(b.E)), thousands(int64(b.EAnywhere)),
			ratio(float64(r.Tokens), b.G), ratio(float64(r.Tokens), b.E), r.ChunksReused)
	}
	for _, op := range []string{"u", "c", "r"} {
		b, r := p.ByOp[op], p.RagsyncByOp[op]
		if b == nil && r == nil {
			continue
		}
		if b == nil {
			b = &opCounts{}
		}
		if r == nil {
			r = &ragOpCounts{}
		}
		line(op, *b, *r)
		tot.Versions += b.Versions
		tot.W, tot.G, tot.E, tot.EAnywhere = tot.W+b.W, tot.G+b.G, tot.E+b.E, tot.EAnywhere+b.EAnywhere
		rag.Tokens += r.Tokens
		rag.ChunksReused += r.ChunksReused
	}
	line("all", tot, rag)
	_ = tw.Flush()
	if r := p.RagsyncByOp["?"]; r != nil {
		fmt.Fprintf(out, "note (%s): %d versions (%d tokens) could not be attributed to an op\n", p.Name, r.Versions, r.Tokens)
	}
	if rag.Tokens+p.RagsyncByOp["?"].tokens() != p.RagsyncCounted {
		fmt.Fprintf(out, "note (%s): the ops add up to %d tokens, the texts sent to %d\n", p.Name, rag.Tokens, p.RagsyncCounted)
	}
}

func (c *ragOpCounts) tokens() int {
	if c == nil {
		return 0
	}
	return c.Tokens
}

func (r *result) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// -out may name a directory that does not exist yet: a 20-minute run
	// should not end on that.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// thousands renders n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
