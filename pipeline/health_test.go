package pipeline_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
)

// TestHealthyReportsAStallWhileRetrying: a batch retried for longer than
// StallAfter makes Healthy false; the same batch completing makes it true
// again. A fake clock advances two minutes per embed attempt.
func TestHealthyReportsAStallWhileRetrying(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var p *pipeline.Pipeline
	var calls atomic.Int32
	var healthDuring []bool
	b.emb.fail = func([]string) error {
		healthDuring = append(healthDuring, p.Healthy())
		mu.Lock()
		now = now.Add(2 * time.Minute)
		mu.Unlock()
		if calls.Add(1) <= 4 {
			return transientErr{}
		}
		return nil
	}
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}}}
	p, err = pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2, StallAfter: 5 * time.Minute}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	pipeline.SetClock(p, clock)
	require.True(t, p.Healthy(), "idle is healthy")
	require.NoError(t, p.Run(t.Context()))
	// Attempts at 0, 2, 4, 6, 8 minutes: healthy until past 5 minutes of retrying.
	require.Equal(t, []bool{true, true, true, false, false}, healthDuring)
	require.True(t, p.Healthy(), "the batch completed")
	require.EqualValues(t, 1, src.acked.Load())
}

// ackFailingSource hands over one batch whose acknowledgement fails
// (transiently) until it was tried n times, and nothing after it.
type ackFailingSource struct {
	sliceSource
	tries  atomic.Int32
	n      int32
	onFail func()
}

func (s *ackFailingSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	b, err := s.sliceSource.Fetch(ctx)
	if err != nil {
		if errors.Is(err, io.EOF) {
			<-ctx.Done() // a source that stays open, with nothing more to say
			return cdc.Batch{}, ctx.Err()
		}
		return b, err
	}
	b.Ack = func(context.Context) error {
		if s.tries.Add(1) <= s.n {
			s.onFail()
			return transientErr{}
		}
		s.acked.Add(1)
		return nil
	}
	return b, nil
}

// TestHealthyReportsAStallWhileAcknowledging: the only batch in flight,
// applied, whose acknowledgement keeps failing is a stall like a change
// whose apply keeps failing: Healthy turns false past StallAfter, and true
// once the acknowledgement went through. (It read as idle before: the
// batch had left its lane to be acknowledged.)
func TestHealthyReportsAStallWhileAcknowledging(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var p *pipeline.Pipeline
	var healthDuring []bool
	src := &ackFailingSource{n: 4, onFail: func() {
		healthy := p.Healthy()
		mu.Lock()
		healthDuring = append(healthDuring, healthy)
		now = now.Add(2 * time.Minute)
		mu.Unlock()
	}}
	src.batches = [][]cdc.Record{{event("c", 1, 10, paraA)}}
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	p, err = pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2, StallAfter: 5 * time.Minute}, pipeline.Stages{
		Source: src, Splitter: ch, DeadLetters: b.dlq,
		Transient: func(err error) bool { return errors.As(err, new(transientErr)) },
		Target:    pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	pipeline.SetClock(p, clock)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	require.Eventually(t, func() bool { return src.acked.Load() == 1 }, 30*time.Second, time.Millisecond)
	// Tries at 0, 2, 4, 6 minutes after the fetch: unhealthy past 5.
	mu.Lock()
	require.Equal(t, []bool{true, true, true, false}, healthDuring)
	mu.Unlock()
	require.True(t, p.Healthy(), "acknowledged: nothing in flight")
	cancel()
	<-ran
}
