package monitor_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// upsertWithProvenance writes one document of one chunk as the pipeline
// writes it, recording model version, chunker and trace id.
func (b *bundle) upsertWithProvenance(t *testing.T, key, text string, p sink.Provenance) {
	t.Helper()
	vecs, err := b.emb.Embed(t.Context(), []string{text})
	require.NoError(t, err)
	d := sink.Document{Table: "public.docs", Key: key, Version: cdc.Version{Kind: "pg", Parts: []uint64{1}, Source: "pg:1/appdb"},
		Provenance: p, Chunks: []sink.Chunk{{Position: 0, Hash: chunker.Hash(text), Text: text, Tokens: chunker.CountTokens(text), Vector: vecs[0]}}}
	_, err = b.st.Upsert(t.Context(), d)
	require.NoError(t, err)
}

// chunkProvenance is what the index records for chunk id: model version,
// chunker and trace id, nil where NULL.
func (b *bundle) chunkProvenance(t *testing.T, id int64) [3]*string {
	t.Helper()
	var p [3]*string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT model_version, chunker, trace_id FROM "+b.schema+".chunks WHERE id = $1", id).
		Scan(&p[0], &p[1], &p[2]))
	return p
}

// The fidelity event of the stored-vector sample says what wrote the
// chunks it measured: the model versions and chunkers, counted, and the
// chunks past the bound with their trace ids, as the index recorded them;
// a chunk written before provenance was recorded shows null. The other
// events carry no sample provenance.
func TestFidelityEventCarriesSampleProvenance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	known := sink.Provenance{ModelVersion: "embed-1-2026-01-01", Chunker: "content-defined/512/128/1024"}
	for i := range 3 {
		p := known
		p.TraceID = fmt.Sprintf("%032x", i+1)
		b.upsertWithProvenance(t, fmt.Sprint("new", i), fmt.Sprintf("alpha beta gamma %d", i), p)
		b.upsertWithProvenance(t, fmt.Sprint("old", i), fmt.Sprintf("delta epsilon zeta %d", i), sink.Provenance{})
	}
	m := b.monitor(t, monitor.Config{SampleSize: 4})
	ctx := ctxT(t)
	_, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)

	// Another model behind the same name: every measured chunk is past
	// the bound, so the event names them all (4 ≤ 5).
	b.srv.SetTransform(swap)
	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.NotNil(t, st.Sample)
	e := findEvent(t, st.Events, monitor.TagFidelity, "uniform_share_over_bound")
	sp := e.SampleProvenance
	require.NotNil(t, sp)
	require.Len(t, sp.PastBound, st.Sample.Measured)
	require.NotEmpty(t, sp.PastBound)
	versions, chunkers := map[string]int{}, map[string]int{}
	deref := func(s *string) string {
		if s == nil {
			return "<null>"
		}
		return *s
	}
	for i, c := range sp.PastBound {
		if i > 0 {
			require.GreaterOrEqual(t, sp.PastBound[i-1].Cosine, c.Cosine, "farthest first")
		}
		require.Greater(t, c.Cosine, monitor.Config{}.WithDefaults().CosineBound)
		want := b.chunkProvenance(t, c.ChunkID)
		require.Equal(t, want, [3]*string{c.ModelVersion, c.Chunker, c.TraceID}, "chunk %d", c.ChunkID)
		versions[deref(c.ModelVersion)]++
		chunkers[deref(c.Chunker)]++
	}
	tally := func(cs []monitor.ProvenanceCount) map[string]int {
		out := map[string]int{}
		for _, c := range cs {
			out[deref(c.Value)] += c.Chunks
		}
		return out
	}
	require.Equal(t, versions, tally(sp.ModelVersions))
	require.Equal(t, chunkers, tally(sp.Chunkers))

	// On the wire: unknown is null; events without a sample have no key.
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	require.Contains(t, generic, "sample_provenance")
	for _, c := range generic["sample_provenance"].(map[string]any)["past_bound"].([]any) {
		c := c.(map[string]any)
		for _, k := range []string{"model_version", "chunker", "trace_id"} {
			require.Contains(t, c, k)
			if c[k] != nil {
				require.NotEmpty(t, c[k])
			}
		}
	}
	canary, err := json.Marshal(findEvent(t, st.Events, monitor.TagFidelity, "canary_p50_cosine"))
	require.NoError(t, err)
	require.NotContains(t, string(canary), "sample_provenance")
}

// Whatever the sample draws, both kinds of chunk can be told apart: a
// sample of every chunk shows the recorded version and the unknown one.
func TestSampleProvenanceCountsKnownAndUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	known := sink.Provenance{ModelVersion: "embed-1-2026-01-01", Chunker: "content-defined/512/128/1024", TraceID: fmt.Sprintf("%032x", 7)}
	b.upsertWithProvenance(t, "new", "alpha beta gamma", known)
	b.upsertWithProvenance(t, "old", "delta epsilon zeta", sink.Provenance{})
	m := b.monitor(t, monitor.Config{SampleSize: 40})
	b.srv.SetTransform(swap)
	st, err := m.Check(ctxT(t), monitor.CheckOptions{})
	require.NoError(t, err)
	sp := findEvent(t, st.Events, monitor.TagFidelity, "uniform_share_over_bound").SampleProvenance
	require.NotNil(t, sp)
	str := func(s string) *string { return &s }
	require.ElementsMatch(t, []monitor.ProvenanceCount{{Value: str("embed-1-2026-01-01"), Chunks: 1}, {Value: nil, Chunks: 1}}, sp.ModelVersions)
	require.ElementsMatch(t, []monitor.ProvenanceCount{{Value: str("content-defined/512/128/1024"), Chunks: 1}, {Value: nil, Chunks: 1}}, sp.Chunkers)
	var text strings.Builder
	require.NoError(t, st.Write(&text, false))
	require.Contains(t, text.String(), "sampled chunks: model version embed-1-2026-01-01 ×1, unknown ×1; chunker content-defined/512/128/1024 ×1, unknown ×1\n")
	traces := map[string]bool{}
	for _, c := range sp.PastBound {
		if c.TraceID != nil {
			traces[*c.TraceID] = true
		}
	}
	require.Equal(t, map[string]bool{known.TraceID: true}, traces, "the chunk with a trace names it")
}
