package monitor_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/monitor"
)

// TestMain fails the run if a goroutine outlives the tests. Nothing is
// ignored: every pool and Redis client a test opens is closed by its
// cleanup, and their background goroutines end with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWindowsSurviveRestart: the drift windows and the query window are
// persisted, so a new Monitor (a restart) continues where the old one
// stopped instead of rebuilding the reference from later chunks.
func TestWindowsSurviveRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	cfg := monitor.Config{ReferenceSize: 50, WindowSize: 50, SampleSize: -1}
	for i := range 50 {
		b.upsert(t, fmt.Sprint("ref", i), 1, fmt.Sprintf("reference text number %d about kubernetes pods", i))
	}
	m := b.monitor(t, cfg)
	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, 50, st.Drift.RefN)
	require.Zero(t, st.Drift.CurN)

	for i := range 30 {
		b.upsert(t, fmt.Sprint("cur", i), 1, fmt.Sprintf("current text number %d about shell commands", i))
	}
	tap := m.QueryTap(b.emb)
	_, err = tap.Embed(ctx, []string{"how do I list files", "what is a pod", "tar extract"})
	require.NoError(t, err)
	st, err = m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, 30, st.Drift.CurN)
	require.Equal(t, 3, st.Query.RefN, "the first queries fill the query reference")
	require.Equal(t, 3, st.QueryCorpus.CurN)
	require.Equal(t, 50, st.QueryCorpus.RefN, "the corpus distance compares queries with the chunk reference")

	// A restart: a new monitor over the same tables.
	b.reg = nil
	m2 := b.monitor(t, cfg)
	st, err = m2.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, 50, st.Drift.RefN)
	require.Equal(t, 30, st.Drift.CurN, "no chunk read twice, none lost")
	require.Equal(t, 3, st.QueryCorpus.CurN)
	require.Equal(t, 3, st.Query.RefN)

	// Pinning a new reference from the index as it is now empties the
	// current window; the running monitor picks the pin up.
	m3 := b.monitor(t, cfg)
	n, err := m3.ResetReference(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, n)
	st, err = m2.Check(ctx, monitor.CheckOptions{}) // notices the pin and reloads
	require.NoError(t, err)
	st, err = m2.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.Zero(t, st.Drift.CurN, "the current window restarts after a pin")
}

// TestRunStopsOnCancel: Run checks at once, then returns nil when its
// context ends, without waiting for the next interval.
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs bytes.Buffer
	cfg := monitor.Config{Interval: time.Hour, SampleSize: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	m, err := monitor.New(t.Context(), cfg, monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb,
		Publishers: []monitor.Publisher{monitor.LogPublisher{Logger: cfg.Logger}}, BaselineBy: "serve"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	require.Eventually(t, func() bool { return !m.Last().Time.IsZero() }, 10*time.Second, 10*time.Millisecond, "first check at start")
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	require.Less(t, time.Since(start), 5*time.Second)
	require.Contains(t, logs.String(), "monitor event")
}

// TestCheckSurvivesEmbedderDown: with the API failing, a check reports the
// error but still computes the other signals, and the next check (API back)
// stores the canary baselines it could not store before.
func TestCheckSurvivesEmbedderDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	m := b.monitor(t, monitor.Config{SampleSize: -1})
	b.srv.FailNext(1, openaitestFault503)
	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "canary")
	findEvent(t, st.Events, monitor.TagErrors, "dead_letters_per_second")
	st, err = m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	e := findEvent(t, st.Events, monitor.TagFidelity, "canary_p50_cosine")
	require.False(t, e.Signal.Exceeded)
	require.Equal(t, "embed-1", e.ModelVersion, "the model the provider reported")
}

// TestLogRing keeps the last warnings with their trace ids for events.
func TestLogRing(t *testing.T) {
	var out bytes.Buffer
	ring := monitor.NewLogRing(slog.NewTextHandler(&out, nil), 2)
	l := slog.New(ring).With("stage", "x")
	l.Info("not kept")
	l.Warn("first", "trace_id", "t1")
	l.Error("second", "error", "boom")
	l.Warn("third")
	got := ring.Recent(0)
	require.Len(t, got, 2)
	require.Equal(t, "second", got[0].Message)
	require.Equal(t, "boom", got[0].Error)
	require.Equal(t, "third", got[1].Message)
	require.Equal(t, 4, strings.Count(out.String(), "\n"), "every record still reaches the wrapped handler")
}
