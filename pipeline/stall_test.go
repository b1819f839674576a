package pipeline_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
)

// syncBuffer is a log sink safe for the summary goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T, msgPrefix string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for l := range strings.SplitSeq(s.b.String(), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, msgPrefix) {
			out = append(out, m)
		}
	}
	return out
}

// TestStallSummaryNamesWhatFailsAndWhatToCheck: while the embedder keeps
// failing, the pipeline logs a periodic summary with the failing stage, the
// error, since when, the setting to check and what /readyz says; once the
// batch goes through, the summaries stop.
func TestStallSummaryNamesWhatFailsAndWhatToCheck(t *testing.T) {
	b := setup(t)
	var recovered atomic.Bool
	b.emb.fail = func([]string) error {
		if recovered.Load() {
			return nil
		}
		return transientErr{}
	}
	var logs syncBuffer
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}}}
	p, err := pipeline.New(pipeline.Config{
		RetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond,
		StallAfter: time.Hour, StallLogInterval: 20 * time.Millisecond,
		Settings: map[string]string{pipeline.StageEmbedder: "embedder.base_url"},
		Logger:   slog.New(slog.NewJSONHandler(&logs, nil)),
	}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Run(t.Context()) }()
	require.Eventually(t, func() bool { return len(logs.lines(t, "pipeline stalled")) >= 2 }, 10*time.Second, 10*time.Millisecond)
	recovered.Store(true)
	require.NoError(t, <-done)

	got := logs.lines(t, "pipeline stalled")
	first := got[0]
	require.Equal(t, "embedder", first["failing"])
	require.Equal(t, "embedder.base_url", first["check"])
	require.Contains(t, first["error"], "provider unavailable")
	require.Contains(t, first["readyz"], "ok until")
	require.NotEmpty(t, first["since"])
	require.Equal(t, first["since"], got[1]["since"], "since is the first failure of the batch, not the latest")
	n := len(logs.lines(t, "pipeline stalled"))
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, n, len(logs.lines(t, "pipeline stalled")), "no summary once the pipeline is idle")
}

// TestStallSummarySaysReadyzFailsPastStallAfter: the summary tells the
// operator that /readyz fails once stall_after has passed.
func TestStallSummarySaysReadyzFailsPastStallAfter(t *testing.T) {
	b := setup(t)
	var recovered atomic.Bool
	b.emb.fail = func([]string) error {
		if recovered.Load() {
			return nil
		}
		return transientErr{}
	}
	var logs syncBuffer
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}}}
	p, err := pipeline.New(pipeline.Config{
		RetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond,
		StallAfter: 50 * time.Millisecond, StallLogInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Run(t.Context()) }()
	require.Eventually(t, func() bool {
		for _, l := range logs.lines(t, "pipeline stalled") {
			if strings.HasPrefix(l["readyz"].(string), "failing") {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	require.False(t, p.Healthy())
	recovered.Store(true)
	require.NoError(t, <-done)
	require.True(t, p.Healthy())
}

// TestReplayCountsNoCachedChunks: replaying changes that are already
// applied (duplicates) or older than what is stored (stale) saves nothing,
// so chunks_cached and chunks_reused stay zero; a replay once
// that applied nothing reported chunks_cached for every chunk.
func TestReplayCountsNoCachedChunks(t *testing.T) {
	b := setup(t)
	batch := []cdc.Record{event("c", 1, 10, paraA+"\n\n"+paraB), event("c", 2, 20, paraC)}
	first := b.run(t, &sliceSource{batches: [][]cdc.Record{batch}}, pipeline.Config{})
	require.Equal(t, 2, first.Stats()["applied"])
	require.Zero(t, first.Stats()["chunks_cached"])

	replay := b.run(t, &sliceSource{batches: [][]cdc.Record{batch}}, pipeline.Config{})
	require.Equal(t, 2, replay.Stats()["duplicate"])
	require.Zero(t, replay.Stats()["applied"])
	require.Zero(t, replay.Stats()["chunks_cached"], "a replay that applied nothing used no cached vector: %s", replay.Stats())
	require.Zero(t, replay.Stats()["chunks_embedded"])

	// A new document with a known paragraph does use the cache.
	more := b.run(t, &sliceSource{batches: [][]cdc.Record{{event("c", 3, 30, paraC)}}}, pipeline.Config{})
	require.Equal(t, 1, more.Stats()["applied"])
	require.Equal(t, 1, more.Stats()["chunks_cached"])
}
