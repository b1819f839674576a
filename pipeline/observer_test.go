package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/pipeline"
)

// recordingObserver records what the pipeline tells it, and fails the
// first Upserting call when failFirst is set.
type recordingObserver struct {
	mu        sync.Mutex
	calls     []string
	failFirst bool
	// applied reads whether the document is in the index at the moment
	// of each call.
	applied func() bool
}

func (o *recordingObserver) note(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, s)
}

func (o *recordingObserver) Upserting(_ context.Context, tenant, id string) error {
	o.note(fmt.Sprintf("upserting %s [%s] stored=%v", id, tenant, o.applied()))
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failFirst {
		o.failFirst = false
		return transientErr{}
	}
	return nil
}

func (o *recordingObserver) Upserted(_ context.Context, tenant, id string) error {
	o.note(fmt.Sprintf("upserted %s [%s] stored=%v", id, tenant, o.applied()))
	return nil
}

func (o *recordingObserver) Deleted(_ context.Context, id string) error {
	o.note(fmt.Sprintf("deleted %s stored=%v", id, o.applied()))
	return nil
}

func (o *recordingObserver) Truncated(_ context.Context, table string) error {
	o.note("truncated " + table)
	return nil
}

// TestObserverHearsEveryWrite: the observer is told before each upsert
// (the document not yet written) and after its commit (written), after a
// delete's commit and after a truncate, never of a stale change; a failed
// Upserting fails the write, which is retried, so the observer hears of
// the document before it is in the index.
func TestObserverHearsEveryWrite(t *testing.T) {
	b := setup(t)
	const id = "public.docs/1"
	obs := &recordingObserver{failFirst: true, applied: func() bool { _, ok := b.text(t, id); return ok }}
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{
		{event("c", 1, 10, paraA)},
		{event("u", 1, 20, paraA+"\n\n"+paraB)},
		{event("u", 1, 15, paraC)}, // stale: older than the stored version
		{event("d", 1, 30, "")},
		{debeziumtest.Message("docs", "t", 0, 40, nil)},
	}}
	p, err := pipeline.New(pipeline.Config{Workers: 1, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq, Observer: obs,
		Transient: func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, b.dlq.letters)
	require.Equal(t, []string{
		"upserting public.docs/1 [] stored=false", // failed: the write is retried
		"upserting public.docs/1 [] stored=false",
		"upserted public.docs/1 [] stored=true",
		"upserting public.docs/1 [] stored=true",
		"upserted public.docs/1 [] stored=true",
		"deleted public.docs/1 stored=false",
		"truncated public.docs",
	}, obs.calls)
}
