package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// TestArmBreakdown edits one paragraph of a document chunked one paragraph
// a chunk: the one new chunk is counted as new tokens, nothing as beside or
// shifted, and the kinds add up to the tokens embedded.
func TestArmBreakdown(t *testing.T) {
	ch, err := chunker.New(chunker.Config{Strategy: chunker.StrategyGreedy, MinTokens: 4, TargetTokens: 8, MaxTokens: 64}.WithDefaults())
	require.NoError(t, err)
	a := newArm("g", ch)
	ps := []string{"Alpha beta gamma delta epsilon zeta eta theta.", "Iota kappa lambda mu nu xi omicron pi.", "Rho sigma tau upsilon phi chi psi omega."}
	v1 := strings.Join(ps, "\n\n")
	a.observe(true, "r", "d", v1, nil)
	require.Zero(t, a.tokens, "the initial load fills the hash set only")

	prev := map[string]bool{}
	for _, p := range paragraphs(v1) {
		prev[chunker.Normalize(p)] = true
	}
	ps[1] = "Iota kappa lambda mu nu xi omicron pi rho."
	a.observe(false, "u", "d", strings.Join(ps, "\n\n"), prev)
	require.Equal(t, 1, a.editChunks)
	require.Equal(t, chunker.CountTokens(ps[1]), a.tokens)
	require.Equal(t, a.tokens, a.newTok)
	require.Zero(t, a.beside+a.shift)
	require.Equal(t, a.tokens, a.byDoc["d"])
	require.Equal(t, []int{1}, a.perUpdate)
}
