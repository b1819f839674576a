package monitor

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// TestReuseDistancesRealData measures what near-duplicate reuse (edit
// similarity ≥ 0.90, the reuse default) costs in vector distance on real
// edits, with the offline hashing embedder at 384 dimensions, and checks
// the normalised L2 rule of the design notes against it: for unit vectors
// ‖a − b‖₂ ≤ 2 < 0.008 × 384, so that rule can never fire. The figures
// compare wording, not a real model.
func TestReuseDistancesRealData(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the shared data; skipped with -short")
	}
	path := filepath.Join("..", "..", "shared", "data", "edits-C", "events.jsonl.gz")
	if _, err := os.Stat(path); os.IsNotExist(err) {
		path = filepath.Join("..", "..", "..", "shared", "data", "edits-C", "events.jsonl.gz")
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skipf("shared data %s is absent", path)
	}
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	ch, err := chunker.New(chunker.Config{})
	require.NoError(t, err)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	docs := map[string]string{}
	var pairsA, pairsB []string
	for sc.Scan() && len(pairsA) < 200 {
		var ev struct {
			DocID string  `json:"doc_id"`
			Op    string  `json:"op"`
			Body  *string `json:"body"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Body == nil {
			continue
		}
		if prev, ok := docs[ev.DocID]; ok && ev.Op == "u" {
			before, after := ch.Split(prev), ch.Split(*ev.Body)
			old := map[string]bool{}
			for _, c := range before {
				old[c.Hash] = true
			}
			for _, c := range after {
				if old[c.Hash] {
					continue
				}
				for _, o := range before {
					if EditSimilarityOK(o.Text, c.Text) {
						pairsA, pairsB = append(pairsA, o.Text), append(pairsB, c.Text)
						break
					}
				}
			}
		}
		docs[ev.DocID] = *ev.Body
	}
	require.NotEmpty(t, pairsA)
	for _, dims := range []int{64, 384, 1536} {
		h := embedder.NewHashing(dims)
		va, err := h.Embed(context.Background(), pairsA)
		require.NoError(t, err)
		vb, err := h.Embed(context.Background(), pairsB)
		require.NoError(t, err)
		var cos, l2 []float64
		for i := range va {
			cos, l2 = append(cos, CosineDistance(va[i], vb[i])), append(l2, L2(va[i], vb[i]))
		}
		slices.Sort(cos)
		slices.Sort(l2)
		bound := NormalisedL2Bound(0.008, dims)
		overL2 := 0
		for _, x := range l2 {
			if x > bound {
				overL2++
			}
		}
		over := 0
		for _, x := range cos {
			if x > 0.05 {
				over++
			}
		}
		t.Logf("D=%4d, %d reused pairs: cosine p50 %.4f p90 %.4f p99 %.4f | L2 p50 %.3f p99 %.3f max %.3f vs bound 0.008×D = %.3f (%d over) | %.0f%% over cosine 0.05",
			dims, len(cos), quantile(cos, 0.5), quantile(cos, 0.9), quantile(cos, 0.99), quantile(l2, 0.5), quantile(l2, 0.99), l2[len(l2)-1], bound, overL2, 100*float64(over)/float64(len(cos)))
		for i := range l2 {
			// ‖a−b‖ = √(2·(1−cos)) for unit vectors: the identity the
			// docs/monitor.md relies on.
			require.InDelta(t, math.Sqrt(2*cos[i]), l2[i], 1e-3)
		}
		if dims >= 384 {
			require.Zero(t, overL2, "the normalised L2 bound cannot be reached at %d dimensions", dims)
		}
	}
}

// EditSimilarityOK says a is within the reuse default (0.90) of b.
func EditSimilarityOK(a, b string) bool { return chunker.EditSimilarity(a, b, 0.9) >= 0.9 }
