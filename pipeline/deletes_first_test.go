package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
)

// heldUntilEmbedder holds every text containing word until released()
// says so, or gives up after a while.
type heldUntilEmbedder struct {
	countingEmbedder
	word     string
	released func() bool
}

func (e *heldUntilEmbedder) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if strings.Contains(strings.Join(texts, " "), e.word) {
		deadline := time.Now().Add(10 * time.Second)
		for !e.released() {
			if time.Now().After(deadline) {
				return nil, errors.New("held edits were never released: the delete did not overtake them")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return e.countingEmbedder.EmbedCounted(ctx, texts, tokens)
}

// TestDeleteOvertakesEditsOfOtherDocuments: edits of six documents wait
// for the provider and fill the documents in flight; a delete behind them
// in the same batch is applied meanwhile, and the edits are released only
// by it. The document's own order holds: a re-create after the delete in
// the batch is applied after it.
func TestDeleteOvertakesEditsOfOtherDocuments(t *testing.T) {
	b := setup(t)
	deleted := func(id string) bool {
		d, ok, err := b.store.Document(t.Context(), id)
		return err == nil && ok && d.Deleted
	}
	emb := &heldUntilEmbedder{word: "harbour", released: func() bool { return deleted("public.docs/9") }}
	first := []cdc.Record{event("c", 9, 10, "A lighthouse keeper's log of storms."), event("c", 8, 11, "Orchard notes: the apples ripen late.")}
	var second []cdc.Record
	for id := 1; id <= 6; id++ {
		second = append(second, event("c", id, int64(100+id), fmt.Sprintf("Document %d says something of its own about harbours.", id)))
	}
	second = append(second,
		event("u", 8, 120, "Orchard notes: the pears ripen early."), // an edit of another document, before the delete
		event("d", 9, 121, ""),
		event("c", 9, 122, "The lighthouse is open again."), // the document's own later change
	)
	src := &sliceSource{batches: [][]cdc.Record{first, second}}
	p, err := pipeline.New(pipeline.Config{Workers: 2, MaxInFlightDocuments: 2, MaxAttempts: 1, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t), DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, b.dlq.letters)
	for id := 1; id <= 6; id++ {
		_, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
		require.True(t, ok, "document %d applied", id)
	}
	txt, ok := b.text(t, "public.docs/9")
	require.True(t, ok, "the re-create after the delete is applied after it")
	require.Equal(t, "The lighthouse is open again.", txt)
	txt, _ = b.text(t, "public.docs/8")
	require.Equal(t, "Orchard notes: the pears ripen early.", txt)
	require.EqualValues(t, 2, src.acked.Load())
}
