package chunker_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/ragsync/ragsync/chunker"
)

// words350 is a 350-word text of distinct words.
func words(n int, prefix string) []string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return w
}

func TestEditSimilarity(t *testing.T) {
	base := words(350, "w")
	oneWord := append([]string(nil), base...)
	oneWord[100] = "changed"
	tests := []struct {
		name string
		a, b string
		min  float64
		want float64
	}{
		{"both empty", "", "  \n", 0.97, 1},
		{"one empty", "", "a b", 0, 0},
		{"identical", "a b c", "a b c", 0.97, 1},
		{"reflow is identical", "a  b\n\nc", "a b c", 0.97, 1},
		{"one word of 350 replaced", strings.Join(base, " "), strings.Join(oneWord, " "), 0.97, 1 - 2.0/700},
		{"one word appended", "a b c", "a b c d", 0, 1 - 1.0/7},
		{"below min returns 0", "a b c", "x y z", 0.5, 0},
		{"length difference alone below min", "a", "a b c d e f g h", 0.9, 0},
		{"disjoint with min 0", "a b", "c d", 0, 0},
		{"exactly at the bound despite float rounding", strings.Join(base[:40], " "), "x0 x1 x2 x3 " + strings.Join(base[4:40], " "), 0.9, 0.9},
		{"transposed words", "a b c d", "b a c d", 0, 1 - 2.0/8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, chunker.EditSimilarity(tc.a, tc.b, tc.min), 1e-9)
			// Symmetric.
			require.InDelta(t, tc.want, chunker.EditSimilarity(tc.b, tc.a, tc.min), 1e-9)
		})
	}
}

func TestShingleSimilarity(t *testing.T) {
	base := words(350, "w")
	oneWord := append([]string(nil), base...)
	oneWord[100] = "changed"
	tests := []struct {
		name string
		a, b string
		want float64
	}{
		{"both empty", "", "", 1},
		{"one empty", "", "a b c", 0},
		{"identical after normalisation", "a\tb  c d", "a b c d", 1},
		{"short texts compare whole", "a b", "a b", 1},
		{"short texts differ", "a b", "a c", 0},
		// 348 shingles, 3 of them replaced: 345/(348+348-345).
		{"one word of 350", strings.Join(base, " "), strings.Join(oneWord, " "), 345.0 / 351},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, chunker.ShingleSimilarity(tc.a, tc.b), 1e-9)
		})
	}
}

func TestFuzzyHash(t *testing.T) {
	long := strings.Join(words(1500, "word"), " ")
	require.Greater(t, len(long), chunker.FuzzyMinBytes)

	t.Run("too short", func(t *testing.T) {
		_, err := chunker.FuzzyHash("short text")
		require.ErrorIs(t, err, chunker.ErrTooShortForFuzzy)
	})
	t.Run("exactly the minimum is too short", func(t *testing.T) {
		_, err := chunker.FuzzyHash(strings.Repeat("a", chunker.FuzzyMinBytes))
		require.ErrorIs(t, err, chunker.ErrTooShortForFuzzy)
	})
	t.Run("whitespace does not count towards the minimum", func(t *testing.T) {
		_, err := chunker.FuzzyHash(strings.Repeat("ab     ", 1000)) // 2999 bytes normalised
		require.ErrorIs(t, err, chunker.ErrTooShortForFuzzy)
	})
	t.Run("reflow keeps the hash", func(t *testing.T) {
		h1, err := chunker.FuzzyHash(long)
		require.NoError(t, err)
		h2, err := chunker.FuzzyHash(strings.ReplaceAll(long, " ", "\n  "))
		require.NoError(t, err)
		require.Equal(t, h1, h2)
		s, err := chunker.FuzzyScore(h1, h2)
		require.NoError(t, err)
		require.Equal(t, 100, s)
	})
	t.Run("malformed hash", func(t *testing.T) {
		_, err := chunker.FuzzyScore("nonsense", "3:abc:def")
		require.Error(t, err)
	})
}

func TestDocSimilarity(t *testing.T) {
	long := words(1500, "word")
	edited := append([]string(nil), long...)
	for i := 700; i < 760; i++ {
		edited[i] = "x"
	}
	tests := []struct {
		name       string
		a, b       string
		wantMethod string
		min, max   int
	}{
		{"long identical", strings.Join(long, " "), strings.Join(long, " "), chunker.MethodSsdeep, 100, 100},
		{"long edited", strings.Join(long, " "), strings.Join(edited, " "), chunker.MethodSsdeep, 50, 99},
		{"long vs unrelated", strings.Join(long, " "), strings.Join(words(1500, "other"), " "), chunker.MethodSsdeep, 0, 10},
		{"short falls back to shingles", "one two three four", "one two three five", chunker.MethodShingle, 33, 34},
		{"one short one long falls back", "one two three", strings.Join(long, " "), chunker.MethodShingle, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, m := chunker.DocSimilarity(tc.a, tc.b)
			require.Equal(t, tc.wantMethod, m)
			require.GreaterOrEqual(t, s, tc.min)
			require.LessOrEqual(t, s, tc.max)
		})
	}
}

func BenchmarkEditSimilarity(b *testing.B) {
	base := words(350, "w")
	ed := append([]string(nil), base...)
	ed[10], ed[200] = "x", "y"
	x, y := strings.Join(base, " "), strings.Join(ed, " ")
	for b.Loop() {
		chunker.EditSimilarity(x, y, 0.97)
	}
}

// TestWordsParity: the word-list functions the reuse planner calls once per
// text agree with the string functions that normalise every time: Words
// with the words of Normalize, WordCount with len(Words), EditLengthsAllow
// with EditSimilarity's early 0, EditSimilarityWords with EditSimilarity
// and ShingleSimilarityWords with ShingleSimilarity.
func TestWordsParity(t *testing.T) {
	texts := []string{"", " ", "\n\t", "a", " a b ", "a  b\n\nc", "e\u0301 x", "é x", "\u0301a b", "x \u2003 y\u2000z",
		"a\u00a0b\u3000c", "\u2028one\u2029two\u0085three", "caf\u0065\u0301 au lait", "bad \xff utf8 \xc3", "Ω\u212b \u00c5 A\u030a"}
	rng := rand.New(rand.NewPCG(1, 2))
	vocab := []string{"a", "b", "c", "é", "e\u0301", "Å", "A\u030a", " ", "  ", "\n", "\u00a0", "\u2003", "\u0301", "x", "\t", "\r", "\v", "\f", "\u0085", "\u2028", "word", "Word"}
	for range 300 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		require.Equal(t, strings.Join(strings.Fields(norm.NFC.String(s)), " "), chunker.Normalize(s), "%q", s)
		want := strings.Fields(chunker.Normalize(s))
		require.Equal(t, want, chunker.Words(s), "%q", s)
		require.Equal(t, len(want), chunker.WordCount(s), "%q", s)
		for _, k := range []int{0, 1, 2, 5, 1000} {
			got := chunker.WordsPrefix(s, k)
			require.Equal(t, want[:min(k, len(want))], got, "%q, %d words", s, k)
		}
	}
	for i, a := range texts {
		b := texts[(i*7+3)%len(texts)]
		if i%3 == 0 && len(a) > 2 { // a near neighbour
			b = a[:len(a)/2] + " x " + a[len(a)/2:]
		}
		wa, wb := chunker.Words(a), chunker.Words(b)
		for _, min := range []float64{0, 0.5, 0.9, 0.99} {
			want := chunker.EditSimilarity(a, b, min)
			require.Equal(t, want, chunker.EditSimilarityWords(wa, wb, min), "%q %q %v", a, b, min)
			maxD, ok := chunker.EditBudget(chunker.WordCount(a), chunker.WordCount(b), min)
			if !ok {
				require.Zero(t, want, "%q %q %v", a, b, min)
			} else if !chunker.EditPrefixAllows(wa, chunker.WordsPrefix(b, 2*maxD+1), maxD) {
				require.Zero(t, want, "%q %q %v", a, b, min)
			}
		}
		require.Equal(t, chunker.ShingleSimilarity(a, b), chunker.ShingleSimilarityWords(wa, wb), "%q %q", a, b)
	}
	// Long texts a few edits apart, and far apart.
	base := words(400, "w")
	for _, n := range []int{0, 1, 3, 10, 50, 400} {
		ed := append([]string(nil), base...)
		for k := range n {
			ed[(k*37)%len(ed)] = fmt.Sprintf("x%d", k)
		}
		a, b := strings.Join(base, " "), strings.Join(ed, " ")
		for _, min := range []float64{0, 0.9, 0.99} {
			want := chunker.EditSimilarity(a, b, min)
			require.Equal(t, want, chunker.EditSimilarityWords(base, ed, min), "%d edits, min %v", n, min)
			maxD, ok := chunker.EditBudget(len(base), len(ed), min)
			require.True(t, ok)
			if want > 0 {
				require.True(t, chunker.EditPrefixAllows(ed, chunker.WordsPrefix(a, 2*maxD+1), maxD), "%d edits, min %v", n, min)
			}
		}
	}
}

func BenchmarkEditSimilarityWordsFar(b *testing.B) {
	x, y := words(350, "w"), words(350, "v")
	for b.Loop() {
		chunker.EditSimilarityWords(x, y, 0.99)
	}
}

// TestEditPrefixAllowsIsSound: on short random word sequences over a small
// vocabulary, every pair within maxD edits passes the prefix test, and the
// test rules out some pairs, so it is not vacuous.
func TestEditPrefixAllowsIsSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	seq := func() []string {
		out := make([]string, rng.IntN(12))
		for i := range out {
			out[i] = string(rune('a' + rng.IntN(5)))
		}
		return out
	}
	ruledOut := 0
	for range 20000 {
		a, b := seq(), seq()
		if rng.IntN(2) == 0 && len(a) > 0 { // b a few edits from a
			b = append([]string(nil), a...)
			for range rng.IntN(3) {
				b[rng.IntN(len(b))] = "z"
			}
		}
		sim := chunker.EditSimilarityWords(a, b, 0)
		d := int((1-sim)*float64(len(a)+len(b)) + 0.5)
		for maxD := range 5 {
			prefix := b[:min(len(b), 2*maxD+1)]
			ok := chunker.EditPrefixAllows(a, prefix, maxD)
			if d <= maxD {
				require.True(t, ok, "%v %v within %d edits (%d)", a, b, maxD, d)
			}
			if !ok {
				ruledOut++
			}
		}
	}
	require.Greater(t, ruledOut, 1000)
}
