package embeddertest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
)

// Run runs the contract suite against clients from newClient, which is
// called once per subtest. Clients must be deterministic: the same text
// gives the same vector (true of Hashing and of openaitest's server).
func Run(t *testing.T, newClient func() embedder.Client) {
	t.Helper()
	texts := make([]string, 23)
	for i := range texts {
		texts[i] = fmt.Sprintf("chunk %d: the index follows the document database, change %d", i, i*i)
	}

	t.Run("identity", func(t *testing.T) {
		c := newClient()
		require.NotEmpty(t, c.Model())
		require.Positive(t, c.Dimensions())
	})

	t.Run("dimensions and finite values", func(t *testing.T) {
		c := newClient()
		vecs, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		require.Len(t, vecs, len(texts))
		for i, v := range vecs {
			require.Len(t, v, c.Dimensions(), "vector %d", i)
			nonZero := false
			for _, x := range v {
				require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0), "vector %d", i)
				nonZero = nonZero || x != 0
			}
			require.True(t, nonZero, "vector %d is all zeros", i)
		}
	})

	t.Run("order preserved", func(t *testing.T) {
		c := newClient()
		all, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		// Each text alone, and the batch reversed, must give the same
		// vectors in the matching positions.
		for _, i := range []int{0, 7, len(texts) - 1} {
			one, err := c.Embed(t.Context(), texts[i:i+1])
			require.NoError(t, err)
			require.Equal(t, all[i], one[0], "text %d", i)
		}
		rev := make([]string, len(texts))
		for i, s := range texts {
			rev[len(texts)-1-i] = s
		}
		got, err := c.Embed(t.Context(), rev)
		require.NoError(t, err)
		for i := range texts {
			require.Equal(t, all[i], got[len(texts)-1-i], "text %d", i)
		}
		require.NotEqual(t, all[0], all[1], "different texts give different vectors")
	})

	t.Run("deterministic", func(t *testing.T) {
		a, err := newClient().Embed(t.Context(), texts[:5])
		require.NoError(t, err)
		b, err := newClient().Embed(t.Context(), texts[:5])
		require.NoError(t, err)
		require.Equal(t, a, b)
	})

	t.Run("duplicates", func(t *testing.T) {
		vecs, err := newClient().Embed(t.Context(), []string{texts[3], texts[3]})
		require.NoError(t, err)
		require.Equal(t, vecs[0], vecs[1])
	})

	t.Run("empty input", func(t *testing.T) {
		c := newClient()
		for _, in := range [][]string{nil, {}} {
			vecs, err := c.Embed(t.Context(), in)
			require.NoError(t, err)
			require.Empty(t, vecs)
		}
		// With a cancelled context too: empty input must not reach the
		// network, so nothing can fail.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		vecs, err := c.Embed(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, vecs)
	})

	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		vecs, err := newClient().Embed(ctx, texts)
		require.ErrorIs(t, err, context.Canceled)
		require.Nil(t, vecs)
	})

	t.Run("concurrent use", func(t *testing.T) {
		c := newClient()
		want, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		got := make([][][]float32, 4)
		for g := range 4 {
			wg.Go(func() { got[g], errs[g] = c.Embed(t.Context(), texts) })
		}
		wg.Wait()
		for g := range 4 {
			require.NoError(t, errs[g])
			require.Equal(t, want, got[g])
		}
	})
}
