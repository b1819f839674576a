package chunker_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/ragsync/ragsync/chunker"
)

func pieces(texts ...string) []chunker.Piece {
	out := make([]chunker.Piece, len(texts))
	for i, t := range texts {
		out[i] = chunker.Piece{Hash: chunker.Hash(t), Text: t}
	}
	return out
}

func para(n int, tag string) string {
	w := make([]string, 60)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d-%d", tag, n, i)
	}
	return strings.Join(w, " ")
}

func TestChunkEditSimilarity(t *testing.T) {
	p0, p1, p2 := para(0, "w"), para(1, "w"), para(2, "w")
	edited := strings.Replace(p1, "w1-30", "changed", 1)
	whole := func(a, b []chunker.Piece) int {
		join := func(ps []chunker.Piece) string {
			var s []string
			for _, p := range ps {
				s = append(s, p.Text)
			}
			return strings.Join(s, "\n\n")
		}
		return int(math.Round(100 * chunker.EditSimilarity(join(a), join(b), 0)))
	}
	tests := []struct {
		name     string
		old, new []chunker.Piece
		want     int
	}{
		{"same", pieces(p0, p1, p2), pieces(p0, p1, p2), 100},
		{"both empty", nil, nil, 100},
		{"everything new", pieces(p0), nil, 0},
		{"reflowed only", pieces(p0, p1), pieces(p0, strings.ReplaceAll(p1, " ", "\n")), 100},
		// One word replaced in the middle chunk: the same score as the
		// whole texts' word edit similarity (1 − 2/360).
		{"one word", pieces(p0, p1, p2), pieces(p0, edited, p2), whole(pieces(p0, p1, p2), pieces(p0, edited, p2))},
		{"paragraph appended", pieces(p0, p1), pieces(p0, p1, p2), whole(pieces(p0, p1), pieces(p0, p1, p2))},
		{"paragraph removed", pieces(p0, p1, p2), pieces(p0, p2), whole(pieces(p0, p1, p2), pieces(p0, p2))},
		// A repeated paragraph pairs off as a multiset: one copy of two
		// removed is an edit of 60 words.
		{"repeat removed", pieces(p0, p0, p1), pieces(p0, p1), 100 - int(math.Round(100*60.0/300))},
		{"rewritten", pieces(p0, p1), pieces(para(0, "x"), para(1, "x")), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, chunker.ChunkEditSimilarity(tc.old, tc.new))
		})
	}
}

// TestChunkEditSimilarityLargeRewrite checks that a rewrite beyond the exact
// distance's cap still scores as a rewrite (the changed parts count as
// sharing nothing), which is what keeps its cost bounded.
func TestChunkEditSimilarityLargeRewrite(t *testing.T) {
	var a, b []string
	for i := range 100 {
		a, b = append(a, para(i, "a")), append(b, para(i, "b"))
	}
	require.Equal(t, 0, chunker.ChunkEditSimilarity(pieces(a...), pieces(b...)))
	// Half kept, half rewritten: 1 − 6000/12000.
	require.Equal(t, 50, chunker.ChunkEditSimilarity(pieces(a...), pieces(append(a[:50:50], b[50:]...)...)))
}

// TestNormalizeMatchesFieldsJoin checks the one-pass Normalize against its
// definition: NFC, then whitespace runs collapsed to one space and trimmed.
func TestNormalizeMatchesFieldsJoin(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a", "a ", "a b", "a  b", "a\nb", " a b ", "a b  ", "a\u00a0b",
		"e\u0301 x", "  lead", "trail\t", "x \u2003 y", "one two three", "a b\n\nc d", "\u0301a", "é b  c\u3000d"} {
		want := strings.Join(strings.Fields(norm.NFC.String(s)), " ")
		require.Equal(t, want, chunker.Normalize(s), "%q", s)
	}
}

// TestChunkEditSimilarityCapsTheExactDistance pins what the cap on the
// exact distance trades: an edit of 60 words out and 60 in (a paragraph)
// is measured exactly, and a larger one scores as if the changed chunks
// shared no word, so a rewrite's cost stays bounded (an exact measure
// would score the second 64).
func TestChunkEditSimilarityCapsTheExactDistance(t *testing.T) {
	kept := para(0, "k")
	edit := func(changed int) []chunker.Piece {
		w := strings.Fields(para(1, "x"))
		w = append(w, strings.Fields(para(2, "x"))...) // 120 words
		for i := 0; i < changed; i++ {
			w[i] = fmt.Sprintf("new%d", i)
		}
		return pieces(kept, strings.Join(w, " "))
	}
	old := edit(0)
	// 60 words replaced: D = 120 of n+m = 360 words.
	require.Equal(t, 67, chunker.ChunkEditSimilarity(old, edit(60)))
	// 65 replaced: D = 130 is past the cap; the changed chunks count as
	// sharing nothing: 1 − 240/360.
	require.Equal(t, 33, chunker.ChunkEditSimilarity(old, edit(65)))
}
