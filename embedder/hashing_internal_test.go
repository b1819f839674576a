package embedder

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// vectorReference is Hashing.vector's feature hashing as it was before it
// hashed features without building their strings: two maps and a string
// per bigram and 3-gram (the normalisation before and after is shared). The vectors must stay bit-identical, since stored vectors and
// cached ones are compared with new ones.
func (h *Hashing) vectorReference(text string) []float32 {
	text, content := contentWords(text)
	tf := map[uint64]int{}
	var order []uint64
	add := func(f uint64) {
		if tf[f] == 0 {
			order = append(order, f)
		}
		tf[f]++
	}
	weight := map[uint64]float64{}
	for i, w := range content {
		add(fnv1a('w', w))
		if i > 0 {
			add(fnv1a('b', content[i-1]+" "+w))
		}
		runes := []rune(" " + w + " ")
		for j := 0; j+3 <= len(runes); j++ {
			f := fnv1a('c', string(runes[j:j+3]))
			add(f)
			weight[f] = trigramWeight
		}
	}
	if len(order) == 0 && text != "" {
		runes := []rune(" " + text + " ")
		for j := 0; j+3 <= len(runes); j++ {
			add(fnv1a('c', string(runes[j:j+3])))
		}
	}
	acc := make([]float64, h.dims)
	for _, f := range order {
		w := 1 + math.Log(float64(tf[f]))
		if fw, ok := weight[f]; ok {
			w *= fw
		}
		if f>>63 == 1 {
			w = -w
		}
		acc[f%uint64(h.dims)] += w
	}
	return unitLength(acc)
}

// TestHashingVectorMatchesReference: on fixed and random texts (words and
// stopwords, repeats, punctuation only, accents and combining marks, CJK,
// emoji, invalid UTF-8) the vectors are bit-identical to the reference's.
func TestHashingVectorMatchesReference(t *testing.T) {
	pieces := []string{"the", "and", "of", "Leaves", "leaf", "chains", "chain", "café", "cafe\u0301", "naïve", "日本語", "テキスト",
		"🙂", "x", "a", "I'm", "don't", "42", "3.14", "--", "...", "!?", "\xff", "\xe2\x82", "Ünïcödé", "ß", "İstanbul", "Ωmega",
		"  ", "\n\n", "\t", "word-with-dash", "snake_case", "CamelCase", "ab", "abc"}
	texts := []string{"", " ", "the and of", "...!?", "\xff\xfe", "a", "Citric acid works as well and smells of nothing."}
	rng := rand.New(rand.NewPCG(5, 7))
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
			if rng.IntN(4) > 0 {
				b.WriteByte(' ')
			}
		}
		texts = append(texts, b.String())
	}
	for _, dims := range []int{1, 7, 256} {
		h := NewHashing(dims)
		for _, text := range texts {
			got, want := h.vector(text), h.vectorReference(text)
			require.Equal(t, len(want), len(got))
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "dims %d, %q, entry %d", dims, text, i)
			}
		}
	}
}

// BenchmarkHashingVector compares vector with vectorReference on a ~2 KB
// paragraph of prose.
func BenchmarkHashingVector(b *testing.B) {
	text := strings.Repeat("Citric acid works as well as vinegar for descaling a kettle, and it smells of nothing; "+
		"rinse twice, boil once with fresh water, and the limescale comes away in flakes. ", 12)
	h := NewHashing(256)
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			h.vector(text)
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			h.vectorReference(text)
		}
	})
}
