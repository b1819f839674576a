package chunker

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Normalize's ASCII shortcut gives what the general path gives, on text
// with and without the layout it takes.
func TestNormalizeASCIIShortcutMatchesGeneralPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	alphabet := []string{"a", "b", "Z", "0", ".", " ", " ", "  ", "\t", "\n", "\r\n", "\v", "\f", "é", "e\u0301", "\u00a0", "\u2003", "\x1c", "\x7f"}
	shortcut := 0
	for range 20000 {
		var b []byte
		for range rng.IntN(12) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		s := string(b)
		if n, ok := normalASCII(s); ok {
			shortcut++
			require.Equal(t, normalize(s), s[:n], "%q", s)
		}
		require.Equal(t, normalize(s), Normalize(s), "%q", s)
	}
	require.Greater(t, shortcut, 500, "the shortcut must be exercised")
}
