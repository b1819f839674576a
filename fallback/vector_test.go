package fallback

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// fillEmbedder answers every text with a vector of x in every entry.
type fillEmbedder struct{ x float32 }

func (e fillEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = make([]float32, testDims)
		for j := range out[i] {
			out[i][j] = e.x
		}
	}
	return out, nil
}

// TestUnsearchableQueryVectorIsAnsweredAsInvalid: a query whose embedding
// is all zeros, or not finite, is answered at once with status error and
// a reason that says so, without a search, a retry or a dead letter.
func TestUnsearchableQueryVectorIsAnsweredAsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    float32
		want string
	}{
		{"zero", 0, "invalid request: invalid query: the query text embeds to a zero vector (every entry 0), which has no cosine distance to anything and can never be found"},
		{"NaN", float32(math.NaN()), "invalid request: invalid query: the query text embeds to a vector holding NaN or Inf, which cannot be searched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, nil)
			fd, err := NewFrontDoor(b.cfg, b.rdb, fillEmbedder{tc.x}, b.searcher, prometheus.NewRegistry(), nil)
			require.NoError(t, err)
			run(t, fd)
			_, err = b.search(t, Query{Text: "anything at all", K: 3})
			var rerr *ReplyError
			require.True(t, errors.As(err, &rerr), "%v", err)
			require.Equal(t, tc.want, rerr.Reason)
			require.Zero(t, b.searcher.searches.Load(), "no search with that vector")
			n, err := b.rdb.XLen(t.Context(), fd.keys.dlq()).Result()
			require.NoError(t, err)
			require.Zero(t, n, "not dead-lettered")
		})
	}
}
