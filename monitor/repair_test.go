package monitor_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// TestReuseDebt stores near-duplicate chunks that reuse the vectors of
// their origins (as pipeline reuse does). The sample must find every
// reused vector and record its true distance (stored origin vector vs a
// fresh embedding of the chunk's own text); repair must re-embed exactly
// the ones past the bound.
func TestReuseDebt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	origins := []string{
		"The quick brown fox jumps over the lazy dog near the river bank every morning",
		"Kubernetes schedules pods onto nodes according to resource requests and limits",
		"Refunds are issued within fourteen days to the original payment method used",
		"Photosynthesis converts light energy into chemical energy stored in glucose",
		"A binary search tree keeps keys in sorted order so lookups take logarithmic time",
		"The committee approved the budget for the new library by a vote of seven to two",
	}
	edited := []string{
		"The quick brown fox jumps over the lazy dog near the river bank every morning.",        // punctuation
		"Kubernetes schedules pods onto nodes according to resource requests and limit",         // one letter
		"Refunds are issued within thirty days to the original payment card that was used",      // several words
		"Photosynthesis converts light energy into chemical energy stored in glucose molecules", // one word
		"A balanced tree keeps keys sorted so that lookups and inserts take logarithmic time",   // rewritten
		"The council rejected the plan for the old museum after a long debate on Tuesday night", // different
	}
	b.upsert(t, "origin", 1, origins...)
	// The reusing document: chunks with their own text and hash, but the
	// vector cached under the origin's hash.
	d := sink.Document{Table: "public.docs", Key: "reuser", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}}
	for i, s := range edited {
		d.Chunks = append(d.Chunks, sink.Chunk{Position: i, Hash: chunker.Hash(s), Text: s, Tokens: chunker.CountTokens(s), VectorHash: chunker.Hash(origins[i])})
	}
	_, err := b.st.Upsert(ctx, d)
	require.NoError(t, err)

	ov, err := b.emb.Embed(ctx, origins)
	require.NoError(t, err)
	ev, err := b.emb.Embed(ctx, edited)
	require.NoError(t, err)
	truth := map[string]float64{}
	var past, under []string
	const bound = 0.05
	for i := range edited {
		dist := monitor.CosineDistance(ov[i], ev[i])
		truth[chunker.Hash(edited[i])] = dist
		if dist > bound {
			past = append(past, edited[i])
		} else {
			under = append(under, edited[i])
		}
		t.Logf("reused %d: true cosine distance %.4f", i, dist)
	}
	require.NotEmpty(t, past, "fixture: some edits must be past the bound")
	require.NotEmpty(t, under, "fixture: some edits must stay under the bound")

	m := b.monitor(t, monitor.Config{SampleSize: 24, CosineBound: bound})
	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	var reused monitor.Aggregate
	for _, a := range st.Fidelity {
		if a.Kind == monitor.KindReused {
			reused = a
		}
	}
	require.Equal(t, len(edited), reused.N, "every reused vector sampled")

	rows, err := b.pool.Query(ctx, "SELECT content_hash, cosine_distance, past_bound FROM monitor_samples WHERE kind = 'reused'")
	require.NoError(t, err)
	type rec struct {
		Hash string
		Dist float64
		Past bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	require.NoError(t, err)
	require.Len(t, got, len(edited))
	for _, r := range got {
		require.InDelta(t, truth[r.Hash], r.Dist, 1e-5, "measured distance of %s", r.Hash)
		require.Equal(t, truth[r.Hash] > bound, r.Past)
	}
	// Exact chunks (own vectors) measure ~0 and are never past the bound.
	var exactPast int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM monitor_samples WHERE kind <> 'reused' AND past_bound").Scan(&exactPast))
	require.Zero(t, exactPast)

	before := len(b.srv.Served())
	var progress []int
	res, err := m.Repair(ctx, b.st, monitor.RepairOptions{Progress: func(done, _ int) { progress = append(progress, done) }})
	require.NoError(t, err)
	require.Equal(t, len(past), res.Repaired)
	require.Equal(t, len(past), progress[len(progress)-1])
	var sent []string
	for _, r := range b.srv.Served()[before:] {
		sent = append(sent, r.Input...)
	}
	require.ElementsMatch(t, past, sent, "repair re-embeds exactly the chunks past the bound")

	stored := func(text string) ([]float32, string) {
		var v pgvector.Vector
		var vh string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT embedding, coalesce(vector_hash, content_hash) FROM chunks WHERE doc_id = 'public.docs/reuser' AND content_hash = $1",
			chunker.Hash(text)).Scan(&v, &vh))
		return v.Slice(), vh
	}
	for i, s := range edited {
		v, vh := stored(s)
		if truth[chunker.Hash(s)] > bound {
			require.InDelta(t, 0, monitor.CosineDistance(v, ev[i]), 1e-6, "repaired %q", s)
			require.Equal(t, chunker.Hash(s), vh)
		} else {
			require.InDelta(t, 0, monitor.CosineDistance(v, ov[i]), 1e-6, "left alone %q", s)
			require.Equal(t, chunker.Hash(origins[i]), vh)
		}
	}
	// A second repair has nothing left to do.
	res, err = m.Repair(ctx, b.st, monitor.RepairOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Pending)
}

// TestRepairBudget: a token budget smaller than the work stops the repair
// between batches and says how much is left.
func TestRepairBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	b.upsert(t, "origin", 1, "one two three four five six", "seven eight nine ten eleven")
	d := sink.Document{Table: "public.docs", Key: "reuser", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}}
	for i, s := range []string{"entirely different words here", "nothing in common at all now"} {
		origin := []string{"one two three four five six", "seven eight nine ten eleven"}[i]
		d.Chunks = append(d.Chunks, sink.Chunk{Position: i, Hash: chunker.Hash(s), Text: s, Tokens: chunker.CountTokens(s), VectorHash: chunker.Hash(origin)})
	}
	_, err := b.st.Upsert(ctx, d)
	require.NoError(t, err)
	m := b.monitor(t, monitor.Config{SampleSize: 8})
	_, err = m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	res, err := m.Repair(ctx, b.st, monitor.RepairOptions{BatchSize: 1, MaxTokens: 6})
	require.NoError(t, err)
	require.Equal(t, 2, res.Pending)
	require.Equal(t, 1, res.Repaired)
	require.Equal(t, 1, res.BudgetLeft)
	require.LessOrEqual(t, res.Tokens, 6)
}
