package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// The breakdown (-breakdown) says where the tokens of the updates go, for
// ragsync's chunker and for the greedy baseline's, with exact hashing only
// (no reuse, no Postgres, no embedding): per update, how many chunks are
// new, how many tokens each costs, and how those tokens split into
//
//   - new: paragraphs the document's previous version lacked (the edit
//     itself; E counts these),
//   - beside: unchanged paragraphs in a chunk that also holds a new one
//     (the rest of the chunk an edit landed in),
//   - shifted: chunks that hold no new paragraph at all (a boundary moved,
//     or a deletion merged two chunks).
//
// It replays the same history the same way as the G baseline (one hash set
// across documents, filled by the initial load), so its G column equals
// the G the replay reports.

// splitter is what the breakdown needs of a chunker.
type splitter interface {
	Split(text string) []chunker.Chunk
}

// arm is one chunker the breakdown replays the history through.
type arm struct {
	name  string
	split splitter
	seen  map[string]bool
	// refine, when set, refines (chunker.Chunker.Refine) every chunk of a
	// version of a document that has stored chunks whose hash the document
	// does not hold, as the pipeline does (chunker.refine_target_tokens).
	refine *chunker.Chunker
	// last holds each live document's chunks as stored: the hashes the
	// refinement keeps, the rows at the end and what recall searches.
	last map[string][]chunker.Chunk
	// fineRows counts each live document's chunks that are refined pieces.
	fineRows map[string]int

	tokens, chunks         int // tokens and chunks of the updates embedded
	newTok, beside, shift  int // tokens by kind (see above)
	shiftChunks            int // chunks holding no new paragraph
	changedSizes           []int
	perUpdate              []int // new chunks per u event that embedded any
	allSizes               []int // every chunk of every update version
	byOp                   map[string]int
	byDoc                  map[string]int // u events' tokens by document
	updates, updatesZero   int            // u events, and those that embedded nothing
	perEvent               []int          // tokens of each u event, in order
	editTokens, editChunks int            // u events only
}

func newArm(name string, s splitter) *arm {
	return &arm{name: name, split: s, seen: map[string]bool{}, byOp: map[string]int{}, byDoc: map[string]int{},
		last: map[string][]chunker.Chunk{}, fineRows: map[string]int{}}
}

// forget drops a deleted document's stored chunks.
func (a *arm) forget(docID string) {
	delete(a.last, docID)
	delete(a.fineRows, docID)
}

// version returns the chunks a version of docID is stored as: the
// splitter's, refined where the arm refines and the document has stored
// chunks, with how many of them are refined pieces.
func (a *arm) version(docID, text string) ([]chunker.Chunk, int) {
	cs := a.split.Split(text)
	stored := a.last[docID]
	if a.refine == nil || len(stored) == 0 {
		return cs, 0
	}
	have := make(map[string]bool, len(stored))
	for _, c := range stored {
		have[c.Hash] = true
	}
	kept := 0
	for _, c := range cs {
		if have[c.Hash] {
			kept++
		}
	}
	out := a.refine.Refine(cs, func(h string) bool { return have[h] })
	return out, len(out) - kept
}

// rows returns the chunks stored at the end and how many are refined.
func (a *arm) rows() (n, fine int) {
	for id, cs := range a.last {
		n += len(cs)
		fine += a.fineRows[id]
	}
	return n, fine
}

// observe chunks one version. prev holds the normalised paragraphs of the
// document's previous version (nil for none); initial versions only fill
// the hash set.
func (a *arm) observe(initial bool, op, docID, text string, prev map[string]bool) {
	cs, fine := a.version(docID, text)
	a.last[docID], a.fineRows[docID] = cs, fine
	n, before := 0, a.editTokens
	for _, c := range cs {
		if !initial {
			a.allSizes = append(a.allSizes, c.Tokens)
		}
		if a.seen[c.Hash] {
			continue
		}
		a.seen[c.Hash] = true
		if initial {
			continue
		}
		n++
		a.tokens += c.Tokens
		a.chunks++
		a.byOp[op] += c.Tokens
		a.changedSizes = append(a.changedSizes, c.Tokens)
		if op != "u" {
			continue
		}
		a.editTokens += c.Tokens
		a.byDoc[docID] += c.Tokens
		a.editChunks++
		fresh, old := 0, 0
		for _, p := range paragraphs(c.Text) {
			if prev[chunker.Normalize(p)] {
				old += chunker.CountTokens(p)
			} else {
				fresh += chunker.CountTokens(p)
			}
		}
		// Paragraph counts need not add up to the chunk's (joins); scale
		// them to it so the three kinds sum to the tokens embedded.
		if fresh == 0 {
			a.shift += c.Tokens
			a.shiftChunks++
			continue
		}
		f := c.Tokens * fresh / (fresh + old)
		a.newTok += f
		a.beside += c.Tokens - f
	}
	if !initial && op == "u" {
		a.updates++
		a.perEvent = append(a.perEvent, a.editTokens-before)
		if n == 0 {
			a.updatesZero++
		} else {
			a.perUpdate = append(a.perUpdate, n)
		}
	}
}

// breakdownArms are the chunkers compared: the greedy baseline and
// ragsync's chunker as the replay configures them (refining the chunks an
// update changes unless -ragsync-refine-target-tokens is -1; then also
// without refinement), then one arm per entry of extra:
// "strategy:target:min:max" (zero fields taking the defaults) chunks every
// version that way, unrefined, and "refine:T" is ragsync's chunker refining
// at T tokens.
func breakdownArms(cfg config, extra string) ([]*arm, error) {
	rag := cfg.ragsyncChunker()
	cfgs := []chunker.Config{
		{Strategy: chunker.StrategyGreedy, TargetTokens: cfg.TargetTokens, RefineTargetTokens: chunker.RefineOff},
		rag,
	}
	names := []string{"G greedy", "ragsync"}
	if rag.RefineTargetTokens != chunker.RefineOff {
		names[1] = fmt.Sprintf("ragsync, refine %d", rag.RefineTargetTokens)
		off := rag
		off.RefineTargetTokens = chunker.RefineOff
		cfgs = append(cfgs, off)
		names = append(names, "ragsync, unrefined")
	}
	for _, f := range strings.Split(extra, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		parts := strings.Split(f, ":")
		if len(parts) == 2 && parts[0] == "refine" {
			c := rag
			n, err := strconv.Atoi(parts[1])
			if err != nil {
				return nil, fmt.Errorf("-breakdown-arms %q: %w", f, err)
			}
			c.RefineTargetTokens = n
			cfgs = append(cfgs, c)
			names = append(names, f)
			continue
		}
		if len(parts) != 4 {
			return nil, fmt.Errorf("-breakdown-arms %q: want strategy:target:min:max or refine:target", f)
		}
		c := chunker.Config{Strategy: parts[0], RefineTargetTokens: chunker.RefineOff}
		for i, dst := range []*int{&c.TargetTokens, &c.MinTokens, &c.MaxTokens} {
			n, err := strconv.Atoi(parts[i+1])
			if err != nil {
				return nil, fmt.Errorf("-breakdown-arms %q: %w", f, err)
			}
			*dst = n
		}
		cfgs = append(cfgs, c)
		names = append(names, f)
	}
	var arms []*arm
	for i, c := range cfgs {
		ch, err := chunker.New(c.WithDefaults())
		if err != nil {
			return nil, fmt.Errorf("-breakdown-arms %s: %w", names[i], err)
		}
		a := newArm(names[i], ch)
		if ch.Refines() {
			a.refine = ch
		}
		arms = append(arms, a)
	}
	return arms, nil
}

// breakdown replays set through arms and prints where their tokens go.
func breakdown(out io.Writer, cfg config, set string, arms []*arm) error {
	evs, err := readEvents(filepath.Join(cfg.DataDir, set, "events.jsonl.gz"), 0)
	if err != nil {
		return err
	}
	evs = sampleDocs(evs, cfg.Sample)
	if cfg.Limit > 0 && len(evs) > cfg.Limit {
		evs = evs[:cfg.Limit]
	}
	paras := map[string]map[string]bool{}
	e := 0 // the edit floor of u events: tokens of paragraphs new to the document
	for _, ev := range evs {
		if ev.Op == "d" {
			delete(paras, ev.DocID)
			for _, a := range arms {
				a.forget(ev.DocID)
			}
			continue
		}
		prev := paras[ev.DocID]
		for _, a := range arms {
			a.observe(ev.initial(), ev.Op, ev.DocID, *ev.Body, prev)
		}
		cur := map[string]bool{}
		for _, p := range paragraphs(*ev.Body) {
			k := chunker.Normalize(p)
			if !cur[k] && !prev[k] && ev.Op == "u" {
				e += chunker.CountTokens(p)
			}
			cur[k] = true
		}
		paras[ev.DocID] = cur
	}
	docs := finalState(evs)
	ids := make([]string, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	qs := sampleQueries(docs, ids, cfg.Queries, cfg.Seed)
	recall := make([]float64, len(arms))
	for i, a := range arms {
		if recall[i], err = exactRecall(cfg, a.last, ids, qs); err != nil {
			return err
		}
	}
	g := arms[0].tokens
	fmt.Fprintf(out, "%s: where the update tokens go (exact hashing, no reuse; sample %g)\n", set, cfg.Sample)
	fmt.Fprintf(out, "  u events %d, edit floor of u events (paragraphs new to the document) %s tokens\n", arms[0].updates, thousands(int64(e)))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\trecall@5\ttokens\t× G\tu × G\trows\tfine\tby op c/u\tu: chunks\tu: tok/chunk\tu: chunks/edit p50/p90\tu: new\tbeside\tshifted (chunks)\tchunk p50/p95\tchanged p50/p95\t")
	for i, a := range arms {
		rows, fine := a.rows()
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.3f\t%.3f\t%s\t%.0f%%\t%s/%s\t%d\t%d\t%d/%d\t%s\t%s\t%s (%d)\t%d/%d\t%d/%d\t\n",
			a.name, recall[i], thousands(int64(a.tokens)), ratio(float64(a.tokens), g), ratio(float64(a.byOp["u"]), arms[0].byOp["u"]),
			thousands(int64(rows)), 100*ratio(float64(fine), rows),
			thousands(int64(a.byOp["c"])), thousands(int64(a.byOp["u"])),
			a.editChunks, a.editTokens/max(a.editChunks, 1),
			percentile(a.perUpdate, 0.5), percentile(a.perUpdate, 0.9),
			thousands(int64(a.newTok)), thousands(int64(a.beside)), thousands(int64(a.shift)), a.shiftChunks,
			percentile(a.allSizes, 0.5), percentile(a.allSizes, 0.95),
			percentile(a.changedSizes, 0.5), percentile(a.changedSizes, 0.95))
	}
	tw.Flush()
	fmt.Fprintf(out, "  recall@5: %d sentences of the final documents against an exact search of each arm's chunks of them under the hashing embedder (%d dims): it compares chunkings, not a model\n", len(qs), cfg.Dimensions)
	top := make([]string, 0, len(arms[0].byDoc))
	for id := range arms[0].byDoc {
		top = append(top, id)
	}
	slices.SortFunc(top, func(x, y string) int { return arms[0].byDoc[y] - arms[0].byDoc[x] })
	fmt.Fprintf(out, "  u tokens of the documents G spends most on (share of G's u tokens), per arm:\n")
	for _, id := range top[:min(8, len(top))] {
		fmt.Fprintf(out, "    %-60s %5.1f%%", id, 100*ratio(float64(arms[0].byDoc[id]), arms[0].editTokens))
		for _, a := range arms {
			fmt.Fprintf(out, "  %s", thousands(int64(a.byDoc[id])))
		}
		fmt.Fprintln(out)
	}
	for _, a := range arms {
		if a.refine == nil || len(arms) < 3 || len(arms[2].perEvent) != len(a.perEvent) || arms[2].refine != nil {
			continue
		}
		// The same update against the unrefined arm: what refining costs
		// where it costs more (the first edit of a region, cut finer than
		// the chunk it lands in, and pieces over unchanged text) and what
		// it saves.
		more, less, over, under := 0, 0, 0, 0
		for i, n := range a.perEvent {
			switch d := n - arms[2].perEvent[i]; {
			case d > 0:
				more, over = more+1, over+d
			case d < 0:
				less, under = less+1, under-d
			}
		}
		fmt.Fprintf(out, "  %s against %s, update by update: %d of %d cost more (%s tokens in all), %d less (%s tokens)\n",
			a.name, arms[2].name, more, len(a.perEvent), thousands(int64(over)), less, thousands(int64(under)))
	}
	for _, a := range arms {
		fmt.Fprintf(out, "  %s: mean chunk %.0f tokens, size-biased mean (the chunk an edit lands in) %.0f\n",
			a.name, mean(a.allSizes), sizeBiased(a.allSizes))
	}
	return nil
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

// sizeBiased is Σx² ÷ Σx: the expected size of the chunk that holds a
// token picked at random.
func sizeBiased(xs []int) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	if s == 0 {
		return 0
	}
	return s2 / s
}

// exactRecall is recallAtK for the chunks stored holds of the documents
// ids, embedded by the hashing embedder the test server serves, searched
// exactly in memory.
func exactRecall(cfg config, stored map[string][]chunker.Chunk, ids []string, qs []query) (float64, error) {
	emb := embedder.NewHashing(cfg.Dimensions)
	var owner []string
	var texts []string
	for _, id := range ids {
		for _, c := range stored[id] {
			owner = append(owner, id)
			texts = append(texts, c.Text)
		}
	}
	ctx := context.Background()
	vecs, err := emb.Embed(ctx, texts)
	if err != nil {
		return 0, err
	}
	qtexts := make([]string, len(qs))
	for i, q := range qs {
		qtexts[i] = q.Sentence
	}
	qvecs, err := emb.Embed(ctx, qtexts)
	if err != nil {
		return 0, err
	}
	hits := 0
	for i, q := range qs {
		type scored struct {
			d  float64
			at int
		}
		best := make([]scored, 0, recallK+1)
		for j, v := range vecs {
			d := cosineDistance(qvecs[i], v)
			if len(best) == recallK && d >= best[recallK-1].d {
				continue
			}
			k := len(best)
			best = append(best, scored{})
			for k > 0 && best[k-1].d > d {
				best[k] = best[k-1]
				k--
			}
			best[k] = scored{d, j}
			best = best[:min(len(best), recallK)]
		}
		for _, b := range best {
			if owner[b.at] == q.DocID {
				hits++
				break
			}
		}
	}
	return float64(hits) / float64(max(len(qs), 1)), nil
}
