package main

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/ragsync/ragsync/chunker"
)

// phase holds what one part of the replay (initial load or updates) cost
// under each way of embedding.
type phase struct {
	Versions int // document versions written (c, u, r); deletes are free
	Deletes  int

	W int // tokens to re-embed every version in full
	G int // tokens of greedy chunks whose hash was never seen before
	E int // tokens of paragraphs new relative to the previous version
	// EAnywhere counts only the paragraphs E counts that no earlier version
	// of any document held: the floor of a paragraph cache shared across
	// documents, which is what G's and ragsync's hash caches are. It is
	// below E where documents are created, renamed or copied.
	EAnywhere int

	GChunkSizes    []int // tokens of every greedy chunk of every version
	GEmbeddedSizes []int // tokens of the greedy chunks G had to embed

	// ByOp splits the counts by event op (r, c, u): creations and renames
	// (c) are new to E but often not to G's cross-document hash set.
	ByOp map[string]*opCounts
}

// opCounts are a phase's counts for one op.
type opCounts struct {
	Versions  int `json:"versions"`
	W         int `json:"w"`
	G         int `json:"g"`
	E         int `json:"e"`
	EAnywhere int `json:"e_anywhere"`
}

// baselines replays a document history and counts W, G and E. It is not
// safe for concurrent use.
type baselines struct {
	greedy *chunker.Chunker
	// seen holds every greedy chunk hash ever embedded, across documents,
	// as a per-chunk hash cache (LangChain's indexing API style) would.
	seen map[string]bool
	// paras holds the normalised paragraphs of each live document's
	// current version.
	paras map[string]map[string]bool
	// everPara holds every normalised paragraph of every version so far.
	everPara map[string]bool
}

func newBaselines(greedy *chunker.Chunker) *baselines {
	return &baselines{greedy: greedy, seen: map[string]bool{}, paras: map[string]map[string]bool{}, everPara: map[string]bool{}}
}

// observe counts one change of docID into p: for op "d" a delete, for any
// other op the document's new full text.
func (b *baselines) observe(p *phase, op, docID, text string) {
	if op == "d" {
		p.Deletes++
		delete(b.paras, docID)
		return
	}
	w, g, e, ea := p.W, p.G, p.E, p.EAnywhere
	defer func() {
		if p.ByOp == nil {
			p.ByOp = map[string]*opCounts{}
		}
		c := p.ByOp[op]
		if c == nil {
			c = &opCounts{}
			p.ByOp[op] = c
		}
		c.Versions++
		c.W += p.W - w
		c.G += p.G - g
		c.E += p.E - e
		c.EAnywhere += p.EAnywhere - ea
	}()
	p.Versions++
	p.W += chunker.CountTokens(text)

	for _, c := range b.greedy.Split(text) {
		p.GChunkSizes = append(p.GChunkSizes, c.Tokens)
		if b.seen[c.Hash] {
			continue
		}
		b.seen[c.Hash] = true
		p.G += c.Tokens
		p.GEmbeddedSizes = append(p.GEmbeddedSizes, c.Tokens)
	}

	prev := b.paras[docID]
	cur := make(map[string]bool)
	for _, para := range paragraphs(text) {
		key := chunker.Normalize(para)
		if cur[key] {
			continue // a repeat within the version costs nothing more
		}
		cur[key] = true
		if !prev[key] {
			n := chunker.CountTokens(para)
			p.E += n
			if !b.everPara[key] {
				p.EAnywhere += n
			}
		}
		b.everPara[key] = true
	}
	b.paras[docID] = cur
}

var blankLine = regexp.MustCompile(`\n[ \t\r\f\v]*\n`)

// paragraphs splits text at blank lines and drops whitespace-only pieces.
// The pieces keep their original text; callers normalise to compare.
func paragraphs(text string) []string {
	var out []string
	for _, p := range blankLine.Split(text, -1) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// percentile returns the nearest-rank q-quantile (0 < q ≤ 1) of xs, or 0
// for none. xs is not modified.
func percentile(xs []int, q float64) int {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := min(max(int(math.Ceil(q*float64(len(s)))), 1), len(s))
	return s[rank-1]
}
