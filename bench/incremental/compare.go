package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// indexedDoc is a live document as an index holds it.
type indexedDoc struct {
	Hashes  []string
	Texts   []string
	Vectors [][]float32
}

// readIndex reads every live document of st's index, with its chunks in
// position order. Chunk rows of soft-deleted documents are not part of
// what a query can see, so they are left out.
func readIndex(ctx context.Context, st *sink.Store) (map[string]indexedDoc, error) {
	out := map[string]indexedDoc{}
	err := st.EachLiveContent(ctx, func(id string, chunks []sink.LiveChunk) error {
		var d indexedDoc
		for _, c := range chunks {
			d.Hashes = append(d.Hashes, c.Hash)
			d.Texts = append(d.Texts, c.Text)
			d.Vectors = append(d.Vectors, c.Vector)
		}
		out[id] = d
		return nil
	})
	return out, err
}

// comparison says how an incrementally built index differs from a fresh
// load of the same final state.
type comparison struct {
	Documents     int `json:"documents"`
	Chunks        int `json:"chunks"`
	MissingDocs   int `json:"missing_documents"` // in the fresh load only
	ExtraDocs     int `json:"extra_documents"`   // in the replayed index only
	ChunkMismatch int `json:"chunk_mismatch_documents"`
	// TextOnly counts the mismatching documents whose chunk hashes all
	// agree: a chunk kept for its normalised hash still holds the text of
	// an earlier version (a whitespace-only edit).
	TextOnly int `json:"text_only_mismatch_documents"`
	// Refined counts the fresh load's chunks the replayed index holds cut
	// into the pieces chunker.Chunker.RefineChunk makes of them (an update
	// refines what it changes), and Pieces those pieces; Replayed counts
	// the replayed index's chunks.
	Refined  int `json:"refined_chunks"`
	Pieces   int `json:"refined_pieces"`
	Replayed int `json:"replayed_chunks"`

	VectorsDiffer int      `json:"vectors_differ"` // equal text, different vector (near-duplicate reuse)
	MaxVectorDist float64  `json:"max_vector_cosine_distance"`
	Examples      []string `json:"examples,omitempty"`
	Pass          bool     `json:"pass"`
}

// maxExamples bounds the differences a comparison lists.
const maxExamples = 5

// compareIndexes checks that got (the replayed index) holds the same
// documents as want (the fresh load), with the same chunk hashes in order
// and the same chunk texts, except that with refine set a fresh chunk may
// be held as the pieces refine cuts it into: a fresh load has nothing
// stored, so it refines nothing, and the replay refines the chunks its
// updates changed. Vectors are only measured: with near-duplicate reuse
// they may legitimately differ within the configured debt.
func compareIndexes(got, want map[string]indexedDoc, refine func(text string) []chunker.Chunk) comparison {
	c := comparison{Documents: len(want)}
	example := func(format string, args ...any) {
		if len(c.Examples) < maxExamples {
			c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w := want[id]
		c.Chunks += len(w.Hashes)
		g, ok := got[id]
		if !ok {
			c.MissingDocs++
			example("missing document %s", id)
			continue
		}
		c.Replayed += len(g.Hashes)
		exp, refined, pieces := expectRefined(w, g, refine)
		if !slices.Equal(g.Hashes, exp.Hashes) || !slices.Equal(g.Texts, exp.Texts) {
			c.ChunkMismatch++
			if slices.Equal(g.Hashes, exp.Hashes) {
				c.TextOnly++
			}
			i := min(firstDiff(g.Hashes, exp.Hashes), firstDiff(g.Texts, exp.Texts))
			what := "hash"
			if i < len(g.Hashes) && i < len(exp.Hashes) && g.Hashes[i] == exp.Hashes[i] {
				what = "text (same hash)"
			}
			example("document %s: %d chunks replayed, %d fresh (%d of them as %d refined pieces); first difference at chunk %d, in its %s",
				id, len(g.Hashes), len(w.Hashes), refined, pieces, i, what)
			if os.Getenv("BENCH_DEBUG") != "" && i < len(g.Texts) && i < len(exp.Texts) {
				example("  replayed %q\n  fresh    %q", g.Texts[i], exp.Texts[i])
			}
			continue
		}
		c.Refined += refined
		c.Pieces += pieces
		for i := range exp.Vectors {
			if exp.Vectors[i] == nil {
				continue // a refined piece: the fresh load has no vector of it
			}
			if d := cosineDistance(g.Vectors[i], exp.Vectors[i]); d > 1e-6 {
				c.VectorsDiffer++
				c.MaxVectorDist = max(c.MaxVectorDist, d)
			}
		}
	}
	var extra []string
	for id := range got {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	slices.Sort(extra)
	for _, id := range extra {
		c.ExtraDocs++
		example("extra document %s", id)
	}
	c.Pass = c.MissingDocs == 0 && c.ExtraDocs == 0 && c.ChunkMismatch == 0
	return c
}

// expectRefined returns the chunks got should hold for the fresh load w:
// each fresh chunk as it is where got holds it there, else, with refine
// set, as the pieces refine cuts it into (without vectors); and how many
// fresh chunks were taken refined, as how many pieces.
func expectRefined(w, g indexedDoc, refine func(text string) []chunker.Chunk) (exp indexedDoc, refined, pieces int) {
	for i := range w.Hashes {
		j := len(exp.Hashes)
		if refine == nil || (j < len(g.Hashes) && g.Hashes[j] == w.Hashes[i]) {
			exp.Hashes = append(exp.Hashes, w.Hashes[i])
			exp.Texts = append(exp.Texts, w.Texts[i])
			exp.Vectors = append(exp.Vectors, w.Vectors[i])
			continue
		}
		ps := refine(w.Texts[i])
		refined++
		pieces += len(ps)
		for _, p := range ps {
			exp.Hashes = append(exp.Hashes, p.Hash)
			exp.Texts = append(exp.Texts, p.Text)
			exp.Vectors = append(exp.Vectors, nil)
		}
	}
	return exp, refined, pieces
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func cosineDistance(a, b []float32) float64 {
	if len(a) != len(b) {
		return 2
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 1
	}
	return 1 - dot/(math.Sqrt(na)*math.Sqrt(nb))
}

func (c comparison) String() string {
	verdict := "PASS"
	if !c.Pass {
		verdict = "FAIL"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "final index vs fresh load: %s (%d documents, %d chunks, %d replayed: %d fresh chunks held as %d refined pieces; missing %d, extra %d, chunk mismatches %d (%d text only, same hashes); vectors differing %d, max cosine distance %.4f)",
		verdict, c.Documents, c.Chunks, c.Replayed, c.Refined, c.Pieces, c.MissingDocs, c.ExtraDocs, c.ChunkMismatch, c.TextOnly, c.VectorsDiffer, c.MaxVectorDist)
	for _, e := range c.Examples {
		b.WriteString("\n  " + e)
	}
	return b.String()
}
