package pipeline

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWordHasMatchesSplitWords: wordHas(w, x) is "x is one of
// splitWords(w)" for ASCII words (mixed case, digits, punctuation) and
// others, with x drawn from the words' own pieces and from elsewhere.
func TestWordHasMatchesSplitWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 4))
	parts := []string{"a", "Z", "q", "7", "-", ".", "'", "_", "(", "É", "é", "ß", "İ", "\ufb01", "Ω", "٣", "\xff", "AbC", "x9", "ab", "abc"}
	hits := 0
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(8) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		w := b.String()
		xs := append(splitWords(w), "a", "abc", "x9", "z", "é", "i̇", "", "ab7", strings.ToLower(parts[rng.IntN(len(parts))]))
		for _, x := range xs {
			want := slices.Contains(splitWords(w), x)
			require.Equal(t, want, wordHas(w, x), "wordHas(%q, %q)", w, x)
			if want {
				hits++
			}
		}
	}
	require.Greater(t, hits, 1000)
}
