package chunker_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// bigTable is a pipe table of n rows with no sentence punctuation, like the
// generated group lists of a documentation site: one block (no blank line)
// far over any chunk size.
func bigTable(n int) string {
	rows := []string{"| Name | Label | Chairs | Contact |", "|------|-------|--------|---------|"}
	for i := range n {
		var chairs []string
		for k := range 1 + i*7%4 { // rows of different lengths, as real ones are
			chairs = append(chairs, fmt.Sprintf("* [Chair %d-%d](https://example.com/chair%d-%d) Company %d<br>", i, k, i, k, (i+k)%7))
		}
		rows = append(rows, fmt.Sprintf("| [Group %d](group-%d/README.md) | group-%d | %s | * [Slack](https://example.com/slack/group-%d)<br> |",
			i, i, i, strings.Join(chairs, ""), i))
	}
	return strings.Join(rows, "\n")
}

// TestEditStabilityTable edits one row of a table far over MaxTokens. The
// content-defined chunker cuts such a table at its rows, so the chunks
// around the edited row change and the rest keep their hashes; split at
// sentence ends and then into word groups of TargetTokens, as prose is,
// its chunks started and ended inside rows, and an edit re-embedded word
// groups of up to TargetTokens on either side of it.
func TestEditStabilityTable(t *testing.T) {
	t.Parallel()
	cfg := chunker.Config{MinTokens: 64, TargetTokens: 256, MaxTokens: 512}
	c := mustNew(t, cfg)
	before := "# Groups\n\nEvery group and its chairs.\n\n" + bigTable(200) + "\n\nThe end of the list."
	after := strings.Replace(before, "[Chair 40-0](", "[Chair 40-0 and Chair 41b](", 1)
	require.NotEqual(t, before, after)
	b, a := c.Split(before), c.Split(after)
	checkInvariants(t, c, cfg, after, a)
	require.GreaterOrEqual(t, len(b), 10, "table too short to measure stability")
	kept := survivors(b, a)
	t.Logf("content-defined kept %d of %d chunks", kept, len(b))
	require.GreaterOrEqual(t, kept, len(b)-2, "one edited row changed more than the chunks around it")
	for _, ch := range a {
		// Cut at rows: no chunk starts or ends inside one.
		for _, l := range strings.Split(ch.Text, "\n") {
			if strings.Contains(l, "|") {
				require.True(t, strings.HasPrefix(l, "|") && strings.HasSuffix(l, "|"),
					"chunk %d cuts a row: %.60q", ch.Position, l)
			}
		}
	}
}

// TestGreedyTableUnchanged pins the greedy strategy's chunks of an
// oversize table: greedy is the incremental benchmark's baseline G, which
// cutting tables at rows for the content-defined strategy must not move.
func TestGreedyTableUnchanged(t *testing.T) {
	t.Parallel()
	g := mustNew(t, chunker.Config{Strategy: chunker.StrategyGreedy, MinTokens: 64, TargetTokens: 256, MaxTokens: 512})
	h := sha256.New()
	for _, ch := range g.Split("# Groups\n\n" + bigTable(200)) {
		fmt.Fprintf(h, "%d %s\n", ch.Tokens, ch.Hash)
	}
	require.Equal(t, "1e60532fac355f2ad3d1caf8ad46a0128cd2c99f6254bbd8e2d8f5ea79c4c967", hex.EncodeToString(h.Sum(nil)))
}
