package chunker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// refineDoc returns 60 distinct paragraphs of about 30 tokens each.
func refineDoc() []string {
	topics := []string{"harbour", "glacier", "orchard", "foundry", "library", "canyon", "market", "observatory"}
	verbs := []string{"measures", "records", "shelters", "feeds", "connects", "survives"}
	ps := make([]string, 60)
	for i := range ps {
		ps[i] = fmt.Sprintf("Paragraph %d: the %s %s its visitors through winter %d, and the keepers note every change in a ledger of %d pages.",
			i, topics[i%len(topics)], verbs[i%len(verbs)], 1900+i*7, 40+i*3)
	}
	return ps
}

func hashSet(cs []chunker.Chunk) map[string]bool {
	m := map[string]bool{}
	for _, c := range cs {
		m[c.Hash] = true
	}
	return m
}

func notIn(cs []chunker.Chunk, set map[string]bool) []chunker.Chunk {
	var out []chunker.Chunk
	for _, c := range cs {
		if !set[c.Hash] {
			out = append(out, c)
		}
	}
	return out
}

// TestRefineEditInRefinedRegionChangesOnePiece: the first edit of a region
// cuts its chunk into fine pieces and keeps every other chunk; a second
// edit in the same region then changes exactly one fine piece, not the
// coarse chunk the region was in.
func TestRefineEditInRefinedRegionChangesOnePiece(t *testing.T) {
	c, err := chunker.New(chunker.Config{TargetTokens: 470, RefineTargetTokens: chunker.SuggestedRefineTargetTokens})
	require.NoError(t, err)
	require.True(t, c.Refines(), "refinement is on by default at target 470")
	const fineMax = 4 * chunker.SuggestedRefineTargetTokens

	ps := refineDoc()
	v1 := c.Split(strings.Join(ps, "\n\n")) // a create: stored as Split cuts it
	require.Greater(t, len(v1), 3)

	ps[30] = strings.Replace(ps[30], "visitors", "guests", 1)
	coarse2 := c.Split(strings.Join(ps, "\n\n"))
	changed := notIn(coarse2, hashSet(v1))
	require.Len(t, changed, 1, "one coarse chunk holds the edit")
	require.Greater(t, changed[0].Tokens, fineMax)
	v2 := c.Refine(coarse2, func(h string) bool { return hashSet(v1)[h] })
	fresh := notIn(v2, hashSet(v1))
	require.Greater(t, len(fresh), 1, "the edited chunk is cut into fine pieces")
	require.Equal(t, len(v1)-1+len(fresh), len(v2), "every other chunk is kept as it was")
	for i, f := range fresh {
		require.LessOrEqual(t, f.Tokens, fineMax)
		require.Equal(t, chunker.Hash(f.Text), f.Hash)
		require.Equal(t, chunker.CountTokens(f.Text), f.Tokens)
		require.Contains(t, changed[0].Text, f.Text, "piece %d is a substring of the chunk it refines", i)
	}
	for i, ch := range v2 {
		require.Equal(t, i, ch.Position)
	}

	// A second edit inside the refined region, away from the first. An
	// edit changes the digest of the paragraph it lands in, so it may also
	// move the piece boundary after that paragraph (then two pieces change,
	// as with paragraph 33 here); paragraph 32 sits inside a piece whose
	// boundaries its edit does not move.
	ps[32] = strings.Replace(ps[32], "ledger", "register", 1)
	require.Contains(t, changed[0].Text, "Paragraph 32:", "the second edit lands in the refined region")
	v3 := c.Refine(c.Split(strings.Join(ps, "\n\n")), func(h string) bool { return hashSet(v2)[h] })
	added, removed := notIn(v3, hashSet(v2)), notIn(v2, hashSet(v3))
	require.Len(t, added, 1, "one fine piece re-embedded")
	require.Len(t, removed, 1)
	require.LessOrEqual(t, added[0].Tokens, fineMax)
	require.Contains(t, added[0].Text, "register")
	require.Len(t, v3, len(v2))
}

// TestRefineUnchangedIsIdempotent: refining a document's text against
// what it stores gives back what it stores, refined regions included, so a
// replay or a backfill read changes nothing.
func TestRefineUnchangedIsIdempotent(t *testing.T) {
	c, err := chunker.New(chunker.Config{TargetTokens: 470, RefineTargetTokens: chunker.SuggestedRefineTargetTokens})
	require.NoError(t, err)
	ps := refineDoc()
	v1 := c.Split(strings.Join(ps, "\n\n"))
	ps[10] = strings.Replace(ps[10], "keepers", "wardens", 1)
	text := strings.Join(ps, "\n\n")
	v2 := c.Refine(c.Split(text), func(h string) bool { return hashSet(v1)[h] })
	again := c.Refine(c.Split(text), func(h string) bool { return hashSet(v2)[h] })
	require.Equal(t, v2, again)
	require.Greater(t, len(v2), len(v1))
}

func TestRefineConfig(t *testing.T) {
	require.Equal(t, chunker.RefineOff, chunker.Config{}.WithDefaults().RefineTargetTokens, "refinement is off unless set")

	off, err := chunker.New(chunker.Config{RefineTargetTokens: chunker.RefineOff})
	require.NoError(t, err)
	require.False(t, off.Refines())
	cs := off.Split(strings.Join(refineDoc(), "\n\n"))
	require.Equal(t, cs, off.Refine(cs, func(string) bool { return false }))
	require.Nil(t, off.RefineChunk(cs[0].Text))

	for _, tc := range []struct {
		refine int
		want   string
	}{
		{-2, "chunker.refine_target_tokens: must be >= 4, or -1 to turn refinement off, got -2"},
		{3, "chunker.refine_target_tokens: must be >= 4"},
		{512, "chunker.refine_target_tokens: must be below target_tokens (512)"},
	} {
		_, err := chunker.New(chunker.Config{RefineTargetTokens: tc.refine})
		require.ErrorContains(t, err, tc.want)
	}
}
