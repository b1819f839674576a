package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// Paragraphs of a tiny hand-made history. Each is well over half the greedy
// test chunker's target, so greedy packing puts exactly one paragraph in
// each chunk and G's expected counts can be read off the paragraphs.
var (
	pA  = "Alpha paragraph talks about the first topic in enough words to fill a chunk."
	pB  = "Bravo paragraph covers the second topic with a similar amount of text here."
	pB2 = "Bravo paragraph covers the second topic with a slightly edited amount of text."
	pC  = "Charlie paragraph is the third one and it closes the document for now."
	// pAWrapped is pA reflowed: the same normalised text.
	pAWrapped = "Alpha paragraph talks about the first topic\n   in enough words to fill a chunk."
)

func doc(paras ...string) string { return strings.Join(paras, "\n\n") }

func tok(ss ...string) int {
	n := 0
	for _, s := range ss {
		n += chunker.CountTokens(s)
	}
	return n
}

func greedyForTest(t *testing.T) *chunker.Chunker {
	t.Helper()
	ch, err := chunker.New(chunker.Config{Strategy: chunker.StrategyGreedy, MinTokens: 4, TargetTokens: 20, MaxTokens: 40})
	require.NoError(t, err)
	for _, p := range []string{pA, pB, pB2, pC, pAWrapped} {
		n := chunker.CountTokens(p)
		require.Greater(t, n, 10, "fixture paragraph must exceed half the target: %q", p)
		require.LessOrEqual(t, n, 20, "fixture paragraph must fit the target: %q", p)
	}
	return ch
}

func TestBaselines(t *testing.T) {
	type change struct {
		op   string
		doc  string
		text string
	}
	tests := []struct {
		name    string
		history []change
		want    phase // GChunkSizes and GEmbeddedSizes are checked by count
		wantG   int   // number of greedy chunks G embeds
	}{
		{
			name:    "first version pays everything",
			history: []change{{doc: "a", text: doc(pA, pB)}},
			want:    phase{Versions: 1, W: tok(doc(pA, pB)), G: tok(pA, pB), E: tok(pA, pB), EAnywhere: tok(pA, pB)},
			wantG:   2,
		},
		{
			name:    "edit of one paragraph pays that paragraph in G and E, the whole text in W",
			history: []change{{doc: "a", text: doc(pA, pB, pC)}, {doc: "a", text: doc(pA, pB2, pC)}},
			want: phase{
				Versions: 2,
				W:        tok(doc(pA, pB, pC), doc(pA, pB2, pC)),
				G:        tok(pA, pB, pC, pB2),
				E:        tok(pA, pB, pC, pB2),
				// pB2 is new anywhere as well.
				EAnywhere: tok(pA, pB, pC, pB2),
			},
			wantG: 4,
		},
		{
			name:    "reflowed paragraph is not new: hashes and paragraphs compare normalised",
			history: []change{{doc: "a", text: doc(pA, pB)}, {doc: "a", text: doc(pAWrapped, pB)}},
			want: phase{
				Versions: 2, W: tok(doc(pA, pB), doc(pAWrapped, pB)),
				G: tok(pA, pB), E: tok(pA, pB), EAnywhere: tok(pA, pB),
			},
			wantG: 2,
		},
		{
			name:    "same text in another document: G's hash set is global, E is per document",
			history: []change{{doc: "a", text: doc(pA, pB)}, {doc: "b", text: doc(pB, pC)}},
			want: phase{
				Versions: 2, W: tok(doc(pA, pB), doc(pB, pC)),
				G:         tok(pA, pB, pC),
				E:         tok(pA, pB, pB, pC),
				EAnywhere: tok(pA, pB, pC),
			},
			wantG: 3,
		},
		{
			name: "delete costs nothing; re-creation is new to E, not to G or E*",
			history: []change{
				{doc: "a", text: doc(pA)},
				{op: "d", doc: "a"},
				{doc: "a", text: doc(pA)},
			},
			want:  phase{Versions: 2, Deletes: 1, W: tok(pA, pA), G: tok(pA), E: tok(pA, pA), EAnywhere: tok(pA)},
			wantG: 1,
		},
		{
			name:    "a paragraph repeated within a version counts once in E",
			history: []change{{doc: "a", text: doc(pA, pB, pA)}},
			want: phase{
				Versions: 1, W: tok(doc(pA, pB, pA)),
				G: tok(pA, pB), E: tok(pA, pB), EAnywhere: tok(pA, pB),
			},
			wantG: 2,
		},
		{
			name:    "removing a paragraph costs nothing",
			history: []change{{doc: "a", text: doc(pA, pB, pC)}, {doc: "a", text: doc(pA, pC)}},
			want: phase{
				Versions: 2, W: tok(doc(pA, pB, pC), doc(pA, pC)),
				G: tok(pA, pB, pC), E: tok(pA, pB, pC), EAnywhere: tok(pA, pB, pC),
			},
			wantG: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBaselines(greedyForTest(t))
			var got phase
			for _, c := range tc.history {
				op := c.op
				if op == "" {
					op = "u"
				}
				b.observe(&got, op, c.doc, c.text)
			}
			require.Len(t, got.GEmbeddedSizes, tc.wantG)
			sum := 0
			for _, n := range got.GEmbeddedSizes {
				sum += n
			}
			require.Equal(t, got.G, sum, "G must be the sum of the embedded greedy chunk sizes")
			require.Equal(t, got.Versions, got.ByOp["u"].Versions)
			require.Equal(t, opCounts{Versions: got.Versions, W: got.W, G: got.G, E: got.E, EAnywhere: got.EAnywhere}, *got.ByOp["u"])
			got.GChunkSizes, got.GEmbeddedSizes, got.ByOp = nil, nil, nil
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParagraphs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "empty", in: "", want: nil},
		{name: "whitespace only", in: " \n\n \t\n", want: nil},
		{name: "one", in: "one line\nsecond line", want: []string{"one line\nsecond line"}},
		{name: "blank line with spaces separates", in: "a\n  \t\nb", want: []string{"a", "b"}},
		{name: "CRLF blank line separates", in: "a\r\n\r\nb", want: []string{"a", "b"}},
		{name: "several blank lines", in: "\n\na\n\n\n\nb\n", want: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, paragraphs(tc.in))
		})
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []int
		q    float64
		want int
	}{
		{name: "none", xs: nil, q: 0.5, want: 0},
		{name: "one", xs: []int{7}, q: 0.95, want: 7},
		{name: "median odd", xs: []int{5, 1, 3}, q: 0.5, want: 3},
		{name: "median even is the lower middle (nearest rank)", xs: []int{4, 1, 3, 2}, q: 0.5, want: 2},
		{name: "p95 of 1..100", xs: seq(100), q: 0.95, want: 95},
		{name: "p95 of 1..10 is the max", xs: seq(10), q: 0.95, want: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]int(nil), tc.xs...)
			require.Equal(t, tc.want, percentile(tc.xs, tc.q))
			require.Equal(t, before, tc.xs, "input must not be reordered")
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[n-1-i] = i + 1 // descending, so sorting matters
	}
	return out
}
