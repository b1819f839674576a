package main

import (
	"fmt"
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

// TestArmRefines: an arm that refines keeps a created document as Split
// cuts it, refines what an update changes, counts the refined pieces in
// its rows, and forgets a deleted document.
func TestArmRefines(t *testing.T) {
	ch, err := chunker.New(chunker.Config{TargetTokens: 470, RefineTargetTokens: chunker.SuggestedRefineTargetTokens}.WithDefaults())
	require.NoError(t, err)
	a := newArm("refine", ch)
	a.refine = ch
	ps := make([]string, 40)
	for i := range ps {
		ps[i] = fmt.Sprintf("Paragraph %d keeps the index of winter %d in a ledger of %d pages, and the keepers check it.", i, 1900+i*7, 40+i*3)
	}
	v1 := strings.Join(ps, "\n\n")
	a.observe(true, "r", "d", v1, nil)
	rows, fine := a.rows()
	require.Equal(t, len(ch.Split(v1)), rows)
	require.Zero(t, fine, "a first load is not refined")

	ps[20] += " One more sentence."
	a.observe(false, "u", "d", strings.Join(ps, "\n\n"), map[string]bool{})
	rows, fine = a.rows()
	require.Greater(t, fine, 1, "the changed chunk is held as fine pieces")
	require.Equal(t, len(ch.Split(v1))-1+fine, rows)
	require.Less(t, a.editTokens, chunker.CountTokens(v1)/2)

	a.forget("d")
	rows, _ = a.rows()
	require.Zero(t, rows)
}
