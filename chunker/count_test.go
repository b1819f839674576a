package chunker

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pieces are the edges the join pricing has to get right: punctuation runs
// with and without a space before them, digits, contractions, non-ASCII
// symbols and letters, and every kind of gap.
var edgePieces = []string{
	"word", "Word", "x", "42", "12345", "it's", "dogs'", "end.", "end .", "end  .", "(see)", "a.b.", "?!",
	"done.\"", "**bold**", "`code`", "x{", "};", "—", "dash—", "café", "東京。", "é\u0301", "#", "- item",
	"1. step", "```", "\t", "\x01", "\u00a0", "\u2028",
	"\n", "\n\n", "\r\n", "\r\n\r\n", "\n\n\n", " ", "  ", "\n  ", " \n",
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(edgePieces[rng.IntN(len(edgePieces))])
		if rng.IntN(3) == 0 {
			b.WriteString([]string{"\n\n", "\n", " ", "\r\n"}[rng.IntN(4)])
		}
	}
	return b.String()
}

// TestEstimatorCountExact checks that a composed count equals the exact
// count of the joined text for every run of units, and that composition
// actually happens on ordinary prose (else the fast path is dead code).
func TestEstimatorCountExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 15))
	guide, err := os.ReadFile("testdata/guide.md")
	require.NoError(t, err)
	texts := []string{string(guide)}
	for range 300 {
		texts = append(texts, randomText(rng, 5+rng.IntN(60)))
	}
	composed, total := 0, 0 // over the guide, prose as users write it
	for _, cfg := range []Config{{MinTokens: 2, TargetTokens: 6, MaxTokens: 8}, {}} {
		c, err := New(cfg)
		require.NoError(t, err)
		for _, text := range texts {
			us := c.units(text)
			est := newEstimator(text, us)
			for i := range us {
				for j := i + 1; j <= len(us) && j <= i+12; j++ {
					s := text[us[i].start:us[j-1].end]
					require.Equal(t, CountTokens(s), est.count(i, j), "units %d..%d of %q: %q", i, j, text, s)
					if text == texts[0] && j-i > 1 {
						total++
						if est.dirty[j] == est.dirty[i+1] {
							composed++
						}
					}
				}
			}
		}
	}
	t.Logf("%d of %d joined runs of the guide composed", composed, total)
	require.Greater(t, composed, total/4)
}

// TestJunction pins the join prices that the composition relies on.
func TestJunction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, a, gap, b string
		ok              bool
	}{
		{name: "letter then blank line", a: "word", gap: "\n\n", b: "Next", ok: true},
		{name: "period then blank line", a: "end.", gap: "\n\n", b: "# Next", ok: true},
		{name: "space before punctuation", a: "end .", gap: "\n", b: "x", ok: true},
		{name: "crlf", a: "end!)", gap: "\r\n\r\n", b: "x", ok: true},
		{name: "spaces in gap", a: "end.", gap: " ", b: "x"},
		{name: "indented next line", a: "end.", gap: "\n  ", b: "x"},
		{name: "non-ASCII run", a: "end—.", gap: "\n\n", b: "x"},
		{name: "non-ASCII last", a: "café", gap: "\n\n", b: "x"},
		{name: "non-ASCII first of next", a: "end", gap: "\n\n", b: "é"},
		{name: "no gap", a: "ab", gap: "", b: "cd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := tc.a + tc.gap + tc.b
			a := unit{start: 0, end: len(tc.a)}
			b := unit{start: len(tc.a) + len(tc.gap), end: len(text)}
			d, ok := junction(text, a, b, CountTokens)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, CountTokens(text), CountTokens(tc.a)+CountTokens(tc.gap)+CountTokens(tc.b)+d)
			}
		})
	}
}

// TestCountTokensASCII compares the piece-wise count with the tokenizer's
// own on the guide, and on random text built from the pieces the
// expression treats specially, with controls and non-ASCII mixed in.
func TestCountTokensASCII(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("testdata/guide.md")
	require.NoError(t, err)
	texts := []string{string(guide), "", " ", "\n", "a", "'", "'S", "'ll've", "x\t\ty", "  \n  a", "a \v\fb", "1234567 89"}
	rng := rand.New(rand.NewPCG(4, 15))
	alphabet := []string{"a", "Z", "q", "0", "7", " ", "  ", "\t", "\n", "\r", "\v", "\f", "'", "'s", "'RE", "'ll", "'d",
		".", ",", "!?", "--", "(", ")", "#", "\"", "`", "_", "\\"}
	unicode := []string{"é", "\u00a0", "—", "東京", "\u2028", "\u0301", "\x85", "ſ", "\xff"}
	for k := range 4000 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			if k%2 == 0 && rng.IntN(10) == 0 { // controls, non-ASCII: the tokenizer's windows
				if rng.IntN(2) == 0 {
					b.WriteByte(byte(rng.IntN(0x80)))
				} else {
					b.WriteString(unicode[rng.IntN(len(unicode))])
				}
			} else {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		require.Equal(t, countBPE(text), CountTokens(text), "%q", text)
	}
	// The tokenizer sees only windows around what the scanner cannot
	// classify, not the whole text.
	var slow []string
	n := countPieces("plain words.\nA café\u00a0here\nBack to ASCII text", func(s string) int {
		slow = append(slow, s)
		return countBPE(s)
	})
	require.Equal(t, countBPE("plain words.\nA café\u00a0here\nBack to ASCII text"), n)
	require.Contains(t, slow, " café\u00a0here\n")
	for _, s := range slow {
		require.NotContains(t, s, "ASCII text", "text after the window is scanned")
	}
}
