package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// TestMonitorSampleExplainsShortfall: monitor --sample 32 on an index of 5
// chunks, none with a reused vector, measures 5 and says why the other 27
// were not: every chunk it did not measure has its reason, in the text and
// in --json.
func TestMonitorSampleExplainsShortfall(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	srv := openaitest.New(t, openaitest.Options{Dimensions: 32})
	base := []string{"--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema, "--index", "mon",
		"--set", "embedder.provider=openai", "--set", "embedder.base_url=" + srv.URL, "--set", "embedder.model=embed-x",
		"--set", "embedder.dimensions=32", "--set", "embedder.api_key=sk-test"}
	ctx := context.Background()
	emb, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, Model: "embed-x", Dimensions: 32, APIKey: "sk-test"})
	require.NoError(t, err)
	st, err := sink.New(ctx, pool, sink.Config{Schema: schema, Index: "mon", Model: "embed-x", Dimensions: 32})
	require.NoError(t, err)
	var texts []string
	for i := range 5 {
		texts = append(texts, fmt.Sprintf("note %d on tide pools and anemones", i))
	}
	vecs, err := emb.Embed(ctx, texts)
	require.NoError(t, err)
	d := sink.Document{Table: "public.t", Key: "1", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}}
	for i, s := range texts {
		d.Chunks = append(d.Chunks, sink.Chunk{Position: i, Hash: chunker.Hash(s), Text: s, Tokens: 8, Vector: vecs[i]})
	}
	_, err = st.Upsert(ctx, d)
	require.NoError(t, err)

	out, err := runCLI(t, "", append([]string{"monitor", "--sample", "32"}, base...)...)
	require.NoError(t, err, out)
	t.Log(out)
	require.Contains(t, out, "stored-vector sample: 32 asked, 5 measured: ")
	require.Contains(t, out, "not drawn: the index has fewer chunks with reused vectors than the sample's reused share")

	out, err = runCLI(t, "", append([]string{"monitor", "--sample", "32", "--json"}, base...)...)
	require.NoError(t, err, out)
	var status struct {
		Sample struct {
			Asked      int `json:"asked"`
			Measured   int `json:"measured"`
			FewReused  int `json:"few_reused"`
			FewCached  int `json:"few_cached"`
			FewUniform int `json:"few_uniform"`
			OverBudget int `json:"over_budget"`
		} `json:"sample"`
	}
	lastJSON(t, out, &status)
	s := status.Sample
	require.Equal(t, 32, s.Asked)
	require.Equal(t, 5, s.Measured)
	require.Equal(t, s.Asked-s.Measured, s.FewReused+s.FewCached+s.FewUniform+s.OverBudget, "every chunk not measured has its reason: %+v", s)
	require.Positive(t, s.FewReused, "no chunk has a reused vector")
}
