package embedder_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/embedder/embeddertest"
)

func TestHashingContract(t *testing.T) {
	t.Parallel()
	embeddertest.Run(t, func() embedder.Client { return embedder.NewHashing(64) })
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

func TestHashing(t *testing.T) {
	t.Parallel()
	h := embedder.NewHashing(256)
	require.Equal(t, "hashing-v1", h.Model())
	require.Equal(t, 256, h.Dimensions())
	vecs, err := h.Embed(t.Context(), []string{
		"The quick brown fox jumps over the lazy dog",
		"the QUICK brown fox   jumps over the lazy dog",
		"A quick brown fox jumped over lazy dogs",
		"Postgres logical replication slots and WAL",
		"",
		"---",
		"it is what it was",
	})
	require.NoError(t, err)
	for i, v := range vecs[:4] {
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		require.InDelta(t, 1, n, 1e-5, "vector %d is unit length", i)
	}
	require.Equal(t, vecs[0], vecs[1], "case and whitespace do not matter")
	near, far := cosine(vecs[0], vecs[2]), cosine(vecs[0], vecs[3])
	require.Greater(t, near, 0.4)
	require.Greater(t, near, far+0.3)
	require.Equal(t, make([]float32, 256), vecs[4], "empty text gives the zero vector")
	require.NotEqual(t, make([]float32, 256), vecs[5], "punctuation still has character features")
	require.NotEqual(t, make([]float32, 256), vecs[6], "stopword-only text still has character features")

	// Stored vectors depend on these exact numbers: pin a few.
	v, err := embedder.NewHashing(8).Embed(t.Context(), []string{"hello world"})
	require.NoError(t, err)
	require.Equal(t, pinnedHello, v[0])
}

// pinnedHello is NewHashing(8) of "hello world". If this changes, every
// index built with hashing-v1 is invalid: bump HashingModel instead.
var pinnedHello = []float32{0.11785113, 0.11785113, 0.47140452, 0, -0.11785113, -0.11785113, 0.70710677, -0.47140452}

func TestHashingErrors(t *testing.T) {
	t.Parallel()
	_, err := embedder.NewHashing(0).Embed(t.Context(), []string{"x"})
	require.ErrorContains(t, err, "dimensions must be > 0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = embedder.NewHashing(4).Embed(ctx, []string{"x"})
	require.ErrorIs(t, err, context.Canceled)
}
