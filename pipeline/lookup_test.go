package pipeline_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
)

// TestSmallDocumentVectorsSurviveFailedTransaction: a document of one
// slice carries its new vectors into its own transaction instead of caching
// them ahead of it (a round trip fewer); when that transaction fails, the pipeline
// caches them anyway, so the replay embeds nothing again.
func TestSmallDocumentVectorsSurviveFailedTransaction(t *testing.T) {
	b := setup(t)
	doc := "A short document about pipelines.\n\nIt has two paragraphs only, both new."
	fs := &failingSink{Index: b.store}
	fs.fail.Store(true)
	cfg := pipeline.Config{Workers: 1}
	p := b.newPipeline(t, &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, doc)}}}, cfg, fs)
	require.NoError(t, p.Run(t.Context()))
	require.Len(t, b.dlq.all(), 1, "the lost transaction dead-letters the document")
	first := len(b.emb.embedded())
	require.Positive(t, first)

	fs.fail.Store(false)
	p = b.newPipeline(t, &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, doc)}}}, cfg, fs)
	require.NoError(t, p.Run(t.Context()))
	require.Len(t, b.emb.embedded(), first, "nothing is embedded twice")
	require.Equal(t, first, p.Stats()["chunks_cached"])
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, doc, txt)
}

// TestLookupStaleChangeIsSkippedNotRefused: with a Lookup stage the fence
// is read after chunking; a stale change that could not be indexed (here:
// over max_document_bytes) is still skipped as stale, not dead-lettered,
// as when the fence was read first.
func TestLookupStaleChangeIsSkippedNotRefused(t *testing.T) {
	b := setup(t)
	big := strings.Repeat("Too large to index, but older than what is stored. ", 100)
	src := &sliceSource{batches: [][]cdc.Record{
		{event("c", 1, 20, "The current text.")},
		{event("u", 1, 10, big)},
	}}
	p := b.newPipeline(t, src, pipeline.Config{MaxDocumentBytes: 2000}, nil)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, b.dlq.all())
	require.Equal(t, 1, p.Stats()["stale"])
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, "The current text.", txt)
}
