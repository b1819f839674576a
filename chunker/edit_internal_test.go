package chunker

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkEditSimilarityReference is ChunkEditSimilarity as it was before it
// cut only the middles of the changed texts into words: it cut them whole.
func chunkEditSimilarityReference(old, new []Piece) int {
	left := make(map[string]int, len(old))
	for _, p := range old {
		left[p.Hash]++
	}
	var n, m int
	var added, removed strings.Builder
	kept := make(map[string]int, len(new))
	for _, p := range new {
		w := len(Words(p.Text))
		m += w
		if left[p.Hash] > 0 {
			left[p.Hash]--
			kept[p.Hash]++
			continue
		}
		added.WriteString(p.Text)
		added.WriteByte(' ')
	}
	for _, p := range old {
		n += len(Words(p.Text))
		if kept[p.Hash] > 0 {
			kept[p.Hash]--
			continue
		}
		removed.WriteString(p.Text)
		removed.WriteByte(' ')
	}
	if n+m == 0 {
		return 100
	}
	wa, wb := Words(removed.String()), Words(added.String())
	d := len(wa) + len(wb)
	if d > 0 {
		min := 1 - float64(editCapWords)/float64(d)
		if sim := editSimilarityWords(wa, wb, min); sim > 0 {
			d = int(float64(d)*(1-sim) + 0.5)
		}
	}
	return int(100*(1-float64(d)/float64(n+m)) + 0.5)
}

// TestChunkEditSimilarityMatchesReference: on random documents and edits
// (small and large, at chunk edges, in non-ASCII text and whitespace, and
// next to combining marks), ChunkEditSimilarity scores as the reference.
func TestChunkEditSimilarityMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 4))
	vocab := []string{"a", "bb", "ccc", "é", "e\u0301", "\u0301", "Å", "x9", "word", "Word", "naïve", "\u00a0", "\u2003", "\u2000"}
	seps := []string{" ", " ", " ", "  ", "\n", "\t", "\u00a0", "\u3000", ""}
	text := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		return b.String()
	}
	edit := func(s string) string {
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(s) + 1)
			for i < len(s) && s[i]&0xc0 == 0x80 { // a rune boundary
				i++
			}
			j := min(len(s), i+rng.IntN(6))
			for j < len(s) && s[j]&0xc0 == 0x80 {
				j++
			}
			s = s[:i] + []string{"", "EDIT5", " ", "\u0301", "zz yy"}[rng.IntN(5)] + s[j:]
		}
		return s
	}
	pieces := func(texts []string) []Piece {
		out := make([]Piece, len(texts))
		for i, x := range texts {
			out[i] = Piece{Hash: Hash(x), Text: x}
		}
		return out
	}
	for trial := range 3000 {
		var old []string
		for range rng.IntN(6) {
			old = append(old, text(rng.IntN(40)))
		}
		cur := append([]string(nil), old...)
		for i := range cur {
			switch rng.IntN(4) {
			case 0:
				cur[i] = edit(cur[i])
			case 1:
				cur[i] = text(rng.IntN(40))
			}
		}
		if rng.IntN(4) == 0 {
			cur = append(cur, text(rng.IntN(20)))
		}
		if rng.IntN(4) == 0 && len(cur) > 0 {
			cur = cur[1:]
		}
		want := chunkEditSimilarityReference(pieces(old), pieces(cur))
		require.Equal(t, want, ChunkEditSimilarity(pieces(old), pieces(cur)), fmt.Sprintf("trial %d: %q → %q", trial, old, cur))
	}
}
