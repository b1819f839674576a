package embedder_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestEmbedCountedTrustsCounts shows that the counts a caller gives decide
// batching and max_input_tokens: the texts are one token each, but the
// counts say 100, so max_batch_tokens 250 cuts batches of two, and a count
// over max_input_tokens dead-letters without being re-counted.
func TestEmbedCountedTrustsCounts(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) {
		cfg.MaxBatchTokens = 250
		cfg.MaxInputTokens = 500
		cfg.OnTooLong = embedder.TooLongDeadLetter
	})
	texts := []string{"a", "b", "c", "d", "e"}
	vecs, err := c.EmbedCounted(t.Context(), texts, []int{100, 100, 100, 100, 100})
	require.NoError(t, err)
	require.Len(t, vecs, 5)
	require.Equal(t, []int{2, 2, 1}, b.srv.BatchSizes())

	_, err = c.EmbedCounted(t.Context(), []string{"a", "b"}, []int{1, 501})
	var in *embedder.InputError
	require.True(t, errors.As(err, &in), "%v", err)
	require.Equal(t, 1, in.Index)
	require.Equal(t, int64(3), b.srv.Requests.Load(), "a dead-lettered input sends nothing")

	_, err = c.EmbedCounted(t.Context(), []string{"a", "b"}, []int{1})
	require.ErrorContains(t, err, "1 token counts for 2 texts")

	// Without counts the client counts: five one-token texts fit one batch.
	_, err = c.Embed(t.Context(), texts)
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 1, 5}, b.srv.BatchSizes())
}
