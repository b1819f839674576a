package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
)

// tokenEmbedder records the counts EmbedCounted receives.
type tokenEmbedder struct {
	*countingEmbedder
	mu     sync.Mutex
	counts map[string]int
}

func (e *tokenEmbedder) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	e.mu.Lock()
	for i, t := range texts {
		e.counts[t] = tokens[i]
	}
	e.mu.Unlock()
	return e.Embed(ctx, texts)
}

// TestEmbedderGetsChunkerCounts checks that the chunker's token counts
// reach an embedder that takes them, through the live lane that serve
// puts in front of it, and that they are the texts' true counts.
func TestEmbedderGetsChunkerCounts(t *testing.T) {
	b := setup(t)
	emb := &tokenEmbedder{countingEmbedder: b.emb, counts: map[string]int{}}
	reusing := pipeline.NewLanes(emb, 0).Live()
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{{
		event("c", 1, 10, paraA+"\n\n"+paraB), event("c", 2, 20, paraC+"\n\n"+paraA+" "+paraB),
	}}}
	p, err := pipeline.New(pipeline.Config{Workers: 2}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: reusing},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))

	embedded := b.emb.embedded()
	require.NotEmpty(t, embedded)
	emb.mu.Lock()
	defer emb.mu.Unlock()
	require.Len(t, emb.counts, len(embedded), "every embedded text came with its count")
	for text, n := range emb.counts {
		require.Equal(t, chunker.CountTokens(text), n, "%q", text)
	}
}

func (e *tokenEmbedder) ReportedModel() string { return "" }
