package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReindexVectorTypeFlags: reindex --index-type, --hnsw-m and
// --hnsw-ef-construction build the new index with them (the config's
// hnsw.rerank_candidates goes along to a bit index and is dropped for
// another type), index list shows them, and wrong values are refused
// before anything is written, naming the setting.
func TestReindexVectorTypeFlags(t *testing.T) {
	e := newReindexEnv(t)
	args, event := e.args, noteEvent
	e.serve(event("c", 1, 10, "First note, about apples."), event("c", 2, 11, "Second note, about pears."))
	withCandidates := func(extra ...string) []string {
		return append(args(extra...), "--set", "hnsw.rerank_candidates=300", "--set", "index_type=bit")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--index-type", "nope"}, `index_type: "nope" is not one of vector (the default), halfvec, bit`},
		{[]string{"--hnsw-m", "48"}, "hnsw.ef_construction: the default, 64, is less than twice hnsw.m (48): set hnsw.ef_construction to 96 or more"},
		{[]string{"--hnsw-m", "8", "--hnsw-ef-construction", "10"}, "hnsw.ef_construction: 10 must be at least twice hnsw.m (8)"},
		{[]string{"--hnsw-m", "-1"}, "hnsw.m: -1 must not be negative"},
		{[]string{"--index-type", "vector", "--dimensions", "3072"}, "embedder.dimensions: 3072 is more than index_type vector allows (2000): set index_type: halfvec"},
	} {
		_, err := runCLI(t, "", args(append([]string{"reindex", "--to", "articles_x"}, tc.args...)...)...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT count(*) FROM indexes WHERE name = 'articles_x'").Scan(&n))
	require.Zero(t, n, "a refused reindex registers nothing")

	out, err := runCLI(t, "", withCandidates("reindex", "--to", "articles_half", "--index-type", "halfvec")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "(hashing-v1, 16 dimensions, halfvec) started")
	out, err = runCLI(t, "", withCandidates("reindex", "--to", "articles_bit", "--index-type", "bit", "--hnsw-m", "8", "--hnsw-ef-construction", "32")...)
	require.NoError(t, err, out)

	out, err = runCLI(t, "", args("index", "list", "--json")...)
	require.NoError(t, err, out)
	got := map[string]indexInfo{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var x indexInfo
			require.NoError(t, json.Unmarshal([]byte(line), &x))
			got[x.Name] = x
		}
	}
	require.Equal(t, "vector", got["articles"].Type)
	require.Equal(t, hnswInfo{M: 16, EfConstruction: 64, EfSearch: 40}, got["articles"].HNSW)
	require.Equal(t, "halfvec", got["articles_half"].Type)
	require.Zero(t, got["articles_half"].RerankCandidates, "only a bit index re-ranks")
	require.Equal(t, "bit", got["articles_bit"].Type)
	require.Equal(t, hnswInfo{M: 8, EfConstruction: 32, EfSearch: 40}, got["articles_bit"].HNSW)
	require.Equal(t, 300, got["articles_bit"].RerankCandidates)
	require.EqualValues(t, 2, got["articles_bit"].Documents)

	out, err = runCLI(t, "", args("index", "list")...)
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^articles_bit\s+hashing-v1\s+16\s+bit\s+8\s+32\s+40\s+2\s`, out)
	out, err = runCLI(t, "", args("index", "status", "articles_bit")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "type bit, HNSW m 8, ef_construction 32, ef_search 40, 300 candidates re-ranked on the full vectors")
}
