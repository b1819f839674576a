package pipeline_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// runWithShadow runs batches through a pipeline writing b's primary and
// shadow, with the status as a declared field (mdTables).
func (b shadowBundle) runWithShadow(t *testing.T, batches [][]cdc.Record, shadow *sink.Store) *pipeline.Pipeline {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Workers: 2, RetryBackoff: 1, MaxRetryBackoff: 2,
		Tables: mdTables,
	}, pipeline.Stages{
		Source: &sliceSource{batches: batches}, Splitter: ch, DeadLetters: b.dlq,
		Transient: func(err error) bool { return errors.As(err, new(transientErr)) },
		Target:    pipeline.Target{Name: "docs", Index: b.primary, Embedder: b.emb},
		Shadows:   []pipeline.Target{{Name: "docs_v2", Index: shadow, Embedder: b.shadowEmb}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p
}

func statusOf(t *testing.T, st *sink.Store, id string) any {
	t.Helper()
	d, ok, err := st.Document(t.Context(), id)
	require.NoError(t, err)
	require.True(t, ok, id)
	return d.Metadata["semantic_tag"]
}

// A metadata-only update reaches the shadows as one: a shadow holding the
// same text takes the metadata alone, embedding nothing; a shadow that
// does not hold the document (it joined later) gets it cut and embedded,
// so it still equals the primary.
func TestShadowTakesMetadataOnlyUpdates(t *testing.T) {
	b := setupShadow(t)
	b.runWithShadow(t, [][]cdc.Record{{
		mdEvent("c", 1, 10, paraA, "draft"), mdEvent("c", 2, 11, paraB, "draft"),
	}}, b.shad)
	primaryTexts, shadowTexts := len(b.emb.texts), b.shadowEmb.texts.Load()
	require.Positive(t, shadowTexts)

	p := b.runWithShadow(t, [][]cdc.Record{{mdEvent("u", 1, 20, paraA, "published")}}, b.shad)
	require.Equal(t, 1, p.Stats()["metadata_only"])
	require.Len(t, b.emb.texts, primaryTexts, "the primary embedded nothing")
	require.Equal(t, shadowTexts, b.shadowEmb.texts.Load(), "the shadow embedded nothing")
	require.Equal(t, "published", statusOf(t, b.primary, "public.docs/1"))
	require.Equal(t, "published", statusOf(t, b.shad, "public.docs/1"))
	sameDocs(t, indexState(t, b.primary), indexState(t, b.shad))

	// A shadow created now holds nothing: the primary's metadata-only
	// update is a full write there.
	late, err := sink.OpenIndex(t.Context(), b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "docs_v3", Model: "small-v3", Dimensions: 16})
	require.NoError(t, err)
	p = b.runWithShadow(t, [][]cdc.Record{{mdEvent("u", 2, 30, paraB, "archived")}}, late)
	require.Equal(t, 1, p.Stats()["metadata_only"])
	require.Greater(t, b.shadowEmb.texts.Load(), shadowTexts, "the late shadow embedded the document it lacked")
	require.Equal(t, "archived", statusOf(t, late, "public.docs/2"))
	d, ok, err := late.Document(t.Context(), "public.docs/2")
	require.NoError(t, err)
	require.True(t, ok)
	want, _, err := b.primary.Document(t.Context(), "public.docs/2")
	require.NoError(t, err)
	require.Equal(t, want.Hashes, d.Hashes, "the late shadow holds the primary's chunks")
	require.Equal(t, want.RenderHash, d.RenderHash)
}
