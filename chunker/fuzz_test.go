package chunker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/ragsync/ragsync/chunker"
)

// FuzzSplit checks the chunker invariants on arbitrary input, under a small
// config (so that oversize splitting runs on short inputs) and the default
// one, with both strategies. Seeds come from testdata/*.md.
func FuzzSplit(f *testing.F) {
	files, err := filepath.Glob("testdata/*.md")
	require.NoError(f, err)
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(string(b), false)
		f.Add(string(b), true)
	}
	for _, s := range []string{"", " ", "```", "# ", "a.b. c! d", "\xff\xfe", "- \n---\n===", "é\u0301\u00a0x"} {
		f.Add(s, false)
	}
	cfgs := map[bool][]chunker.Config{
		false: {{MinTokens: 2, TargetTokens: 6, MaxTokens: 8}, {}},
		true:  {{Strategy: "greedy", MinTokens: 2, TargetTokens: 6, MaxTokens: 8}, {Strategy: "greedy"}},
	}
	chunkers := map[bool][]*chunker.Chunker{}
	for k, cs := range cfgs {
		for _, cfg := range cs {
			chunkers[k] = append(chunkers[k], mustNew(f, cfg))
		}
	}
	f.Fuzz(func(t *testing.T, text string, greedy bool) {
		for i, c := range chunkers[greedy] {
			checkInvariants(t, c, cfgs[greedy][i], text, c.Split(text))
		}
		n := chunker.Normalize(text)
		require.Equal(t, strings.Join(strings.Fields(norm.NFC.String(text)), " "), n, "Normalize is NFC with whitespace collapsed")
		require.Equal(t, n, chunker.Normalize(n), "Normalize is idempotent")
		require.Equal(t, chunker.Hash(text), chunker.Hash(n))
	})
}
