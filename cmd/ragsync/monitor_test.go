package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// lastJSON decodes the last line of out that is a JSON object (warnings
// share the buffer in these tests).
func lastJSON(t *testing.T, out string, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			require.NoError(t, json.Unmarshal([]byte(lines[i]), v), lines[i])
			return
		}
	}
	t.Fatalf("no JSON in %q", out)
}

// monitorIndex writes an index "mon" whose one document has a chunk per
// text, embedded by a fake embedding API (returned), as the pipeline would,
// and returns the server and the flags that point a command at them.
func monitorIndex(t *testing.T, texts []string) (*openaitest.Server, []string) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	srv := openaitest.New(t, openaitest.Options{Dimensions: 32})
	base := []string{"--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema, "--index", "mon",
		"--set", "embedder.provider=openai", "--set", "embedder.base_url=" + srv.URL, "--set", "embedder.model=embed-x",
		"--set", "embedder.dimensions=32", "--set", "embedder.api_key=sk-test"}
	ctx := context.Background()
	emb, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, Model: "embed-x", Dimensions: 32, APIKey: "sk-test"})
	require.NoError(t, err)
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "mon", Model: "embed-x", Dimensions: 32})
	require.NoError(t, err)
	vecs, err := emb.Embed(ctx, texts)
	require.NoError(t, err)
	d := sink.Document{Table: "public.t", Key: "1", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}}
	for i, s := range texts {
		d.Chunks = append(d.Chunks, sink.Chunk{Position: i, Hash: chunker.Hash(s), Text: s, Tokens: len(strings.Fields(s)), Vector: vecs[i]})
	}
	_, err = st.Upsert(ctx, d)
	require.NoError(t, err)
	return srv, base
}

// TestMonitorCommands drives fidelity check, monitor, repair and monitor
// reference against a real index and the fake embedding API, before and
// after the API silently swaps its model.
func TestMonitorCommands(t *testing.T) {
	srv, base := monitorIndex(t, []string{"how to rotate a secret", "where are the logs kept", "deploy on friday afternoons"})

	// No command but serve and monitor baseline takes canary baselines.
	out, err := runCLI(t, "", append([]string{"fidelity", "check", "--sample", "3"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "canary baselines: none of")
	out, err = runCLI(t, "", append([]string{"monitor", "baseline"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "canary baselines taken: ")
	require.Contains(t, out, "taken by monitor baseline")
	out, err = runCLI(t, "", append([]string{"fidelity", "check", "--sample", "3"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "canary")
	require.Contains(t, out, "taken by monitor baseline")

	out, err = runCLI(t, "", append([]string{"monitor"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "healthy")
	require.Contains(t, out, "canary_p50_cosine")

	srv.SetTransform(func(_, _ string, v []float32) []float32 {
		out := make([]float32, len(v))
		for i := range v {
			out[(i+5)%len(v)] = v[i]
		}
		return out
	})
	out, err = runCLI(t, "", append([]string{"fidelity", "check", "--sample", "12", "--json"}, base...)...)
	require.ErrorContains(t, err, "fidelity breach: canary_p50_cosine")
	var res struct {
		Breach bool `json:"breach"`
	}
	lastJSON(t, out, &res)
	require.True(t, res.Breach)

	out, err = runCLI(t, "", append([]string{"monitor", "--json"}, base...)...)
	require.NoError(t, err, "monitor reports, it does not fail on an alarm")
	var status struct {
		Breach bool `json:"breach"`
		Events []struct {
			Schema string `json:"schema"`
		} `json:"events"`
	}
	lastJSON(t, out, &status)
	require.True(t, status.Breach)
	require.Equal(t, "ragsync.monitor.event/v3", status.Events[0].Schema)

	// Every sampled chunk now measures past the bound: repair re-embeds
	// the three of them with the swapped model.
	out, err = runCLI(t, "", append([]string{"repair", "--dry-run", "--json"}, base...)...)
	require.NoError(t, err, out)
	var rep struct{ Pending, Repaired int }
	lastJSON(t, out, &rep)
	require.Equal(t, 3, rep.Pending)
	require.Zero(t, rep.Repaired)
	// stderr is no terminal here: progress comes as lines, not a bar.
	out, err = runCLI(t, "", append([]string{"repair"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "repair: re-embedding 3 chunks past the bound\n")
	require.Contains(t, out, "repair progress: 3 of 3 chunks re-embedded")
	require.NotContains(t, out, "\r", "no bar")
	require.Contains(t, out, "re-embedded 3 of 3 chunks past the bound")

	out, err = runCLI(t, "", append([]string{"monitor", "reference", "--reset"}, base...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "drift reference pinned: 3 chunk vectors")
	_, err = runCLI(t, "", append([]string{"monitor", "reference"}, base...)...)
	require.ErrorContains(t, err, "--reset")
	_, err = runCLI(t, "", append([]string{"monitor", "reference", "--reset", "--queries"}, base...)...)
	require.ErrorContains(t, err, "only 0 recent front-door queries saved, need at least 50", "no front door ran: nothing to pin")

	_, err = runCLI(t, "", append([]string{"monitor", "--set", "monitor.cosine_bound=3"}, base...)...)
	require.ErrorContains(t, err, "monitor.cosine_bound")
}

// TestRepairProgressLines: without a terminal, repair says when it starts,
// then where it is at most once per interval, and when it is done.
func TestRepairProgressLines(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out strings.Builder
	p := repairProgressLines(&out, 10*time.Second, func() time.Time { return clock })
	p(0, 100)
	clock = clock.Add(5 * time.Second)
	p(10, 100) // within the interval: quiet
	clock = clock.Add(5 * time.Second)
	p(20, 100)
	clock = clock.Add(time.Second)
	p(100, 100) // done: always said
	require.Equal(t, "repair: re-embedding 100 chunks past the bound\n"+
		"repair progress: 20 of 100 chunks re-embedded, 10s elapsed, 2 chunks/s, eta 40s\n"+
		"repair progress: 100 of 100 chunks re-embedded, 11s elapsed, 9 chunks/s, eta 0s\n", out.String())
}
