package chunker_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// checkInvariants fails t unless chunks are a valid split of text under cfg:
// in order, each an exact substring, separated only by whitespace, covering
// every non-whitespace byte, with correct hashes and counts, within
// MaxTokens (except a single rune), and reproducible.
func checkInvariants(t testing.TB, c *chunker.Chunker, cfg chunker.Config, text string, chunks []chunker.Chunk) {
	t.Helper()
	cfg = cfg.WithDefaults()
	if strings.TrimFunc(text, unicode.IsSpace) == "" {
		require.Empty(t, chunks, "whitespace-only text gives no chunks")
		return
	}
	require.NotEmpty(t, chunks)
	cursor := 0
	skipSpace := func() {
		for cursor < len(text) {
			r, n := utf8.DecodeRuneInString(text[cursor:])
			if !unicode.IsSpace(r) {
				return
			}
			cursor += n
		}
	}
	for i, ch := range chunks {
		require.Equal(t, i, ch.Position)
		require.NotEmpty(t, ch.Text)
		require.Equal(t, ch.Text, strings.TrimFunc(ch.Text, unicode.IsSpace), "chunk %d is trimmed", i)
		skipSpace()
		require.True(t, strings.HasPrefix(text[cursor:], ch.Text),
			"chunk %d %q is not the next non-space substring at offset %d", i, ch.Text, cursor)
		cursor += len(ch.Text)
		require.Equal(t, chunker.Hash(ch.Text), ch.Hash)
		require.Equal(t, chunker.CountTokens(ch.Text), ch.Tokens)
		if utf8.RuneCountInString(ch.Text) > 1 {
			require.LessOrEqual(t, ch.Tokens, cfg.MaxTokens, "chunk %d %q", i, ch.Text)
		}
	}
	skipSpace()
	require.Equal(t, len(text), cursor, "text after the last chunk is not whitespace")
	require.Equal(t, chunks, c.Split(text), "Split is deterministic")
}
