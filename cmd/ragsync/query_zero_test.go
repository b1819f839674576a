package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueryZeroVectorIsRefused: a query text the hashing embedder turns
// into a zero vector ("..": its character 3-grams cancel out) is refused
// with an error that says so, with and without --json, instead of hits
// scored NaN (which --json could not even encode). The index has 8
// dimensions, where ".." hashes to features that cancel.
func TestQueryZeroVectorIsRefused(t *testing.T) {
	w := newFileWorld(t, eventLines(t, article("c", 7, 10, bodyA)), "")
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(w.cfg, bytes.Replace(cfg, []byte("dimensions: 64"), []byte("dimensions: 8"), 1), 0o644))
	_, _, err = runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.NoError(t, err)
	for _, args := range [][]string{{"query"}, {"query", "--json"}} {
		out, _, err := runCtx(t.Context(), append(args, "--config", w.cfg, "..")...)
		require.EqualError(t, err, "embed query: the query text embeds to a zero vector (every entry 0), which has no cosine distance to anything and can never be found; query with other words", "%v", args)
		require.Empty(t, out)
	}
}

// TestQueryJSONScoreNaNIsNull: a hit without a finite score (a chunk
// stored with a zero vector) prints score null; the line stays JSON.
func TestQueryJSONScoreNaNIsNull(t *testing.T) {
	b, err := json.Marshal(hitJSON{Rank: 1, DocID: "t/1", Score: score(math.NaN())})
	require.NoError(t, err)
	require.Contains(t, string(b), `"score":null`)
	b, err = json.Marshal(hitJSON{Rank: 1, DocID: "t/1", Score: 0.5})
	require.NoError(t, err)
	require.Contains(t, string(b), `"score":0.5`)
}
