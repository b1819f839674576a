package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgvector/pgvector-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// t0 is when the debt of these tests begins.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// debtSetup stores n one-chunk documents, then edits each by one word so
// that it reuses its vector (lenient reuse, debt dated t0 + i seconds).
// It returns the bundle and the edited texts by document id.
func debtSetup(t *testing.T, n int) (reuseBundle, map[int]string) {
	t.Helper()
	b := reuseSetup(t)
	var creates, edits []cdc.Record
	texts := map[int]string{}
	for i := 1; i <= n; i++ {
		base := strings.ReplaceAll(fortyWords(0), "word", fmt.Sprintf("d%dw", i))
		creates = append(creates, event("c", i, int64(10*i), base))
		texts[i] = strings.Replace(base, fmt.Sprintf("d%dw3 ", i), "", 1)
		edits = append(edits, event("u", i, int64(10*i+1), texts[i]))
	}
	b.apply(t, nil, creates...)
	for i, e := range edits {
		cfg := lenient(0.9)
		since := t0.Add(time.Duration(i) * time.Second)
		cfg.Now = func(time.Time) time.Time { return since }
		s := b.apply(t, cfg, e)
		require.Equal(t, 1, s["chunks_reused"], "fixture: edit %d reuses", i)
	}
	return b, texts
}

// clock is a settable time for the repayment.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func outstanding(t *testing.T, st *sink.Store) sink.DebtSummary {
	t.Helper()
	s, err := st.OutstandingDebt(t.Context(), time.Now())
	require.NoError(t, err)
	return s
}

// TestRepayerRepaysWithinWindow: a lone debt waits while the rate's credit
// does not cover it (an edit before its deadline would make it
// unnecessary) and is repaid in the round before its window ends; the
// chunk then holds the exact vector of its text, the predictor learnt from
// the measurement, and the metrics say what was spent.
func TestRepayerRepaysWithinWindow(t *testing.T) {
	b, texts := debtSetup(t, 1)
	require.Equal(t, 1, outstanding(t, b.store).Vectors)
	before := len(b.emb.embedded())
	c := &clock{t: t0}
	reg := prometheus.NewRegistry()
	pred := pipeline.NewPredictor(0)
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: 100 * time.Second, Now: c.now, Predictor: pred, Registerer: reg}, b.store, b.emb)
	require.NoError(t, err)
	var repaidAt time.Time
	for at := t0; at.Before(t0.Add(100 * time.Second)); at = at.Add(10 * time.Second) {
		c.set(at)
		res, err := r.RepayOnce(t.Context())
		require.NoError(t, err)
		if res.Repaid > 0 {
			repaidAt = at
			break
		}
	}
	require.False(t, repaidAt.IsZero(), "never repaid within the window")
	require.Equal(t, t0.Add(90*time.Second), repaidAt, "repaid in the last round before the window ends")
	require.Equal(t, []string{texts[1]}, b.emb.embedded()[before:])
	require.Zero(t, outstanding(t, b.store).Vectors)
	row := b.rows(t, "public.docs/1")[0]
	require.Equal(t, row.Hash, row.VectorHash)
	require.True(t, row.DebtSince.IsZero())
	want, err := b.emb.Embed(t.Context(), []string{texts[1]})
	require.NoError(t, err)
	var got pgvector.Vector
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT embedding FROM "+b.schema+".chunks WHERE doc_id = 'public.docs/1'").Scan(&got))
	require.InDelta(t, 0, monitor.CosineDistance(want[0], got.Slice()), 1e-6, "the chunk row holds the exact vector")
	_, n := pred.Slope()
	require.EqualValues(t, 1, n, "the repayment measured the reuse")
	require.EqualValues(t, chunker.CountTokens(texts[1]), metric(t, reg, "ragsync_pipeline_debt_repaid_tokens_total"))
	require.Zero(t, metric(t, reg, "ragsync_pipeline_debt_vectors"))
}

// metric reads a registered gauge or counter by name.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestRepayerOldestDeadlineFirstAndRate: with more debt than one round's
// rate, the debt due goes first, oldest first, and the rest drains at
// outstanding ÷ window; everything is repaid within the window.
func TestRepayerOldestDeadlineFirstAndRate(t *testing.T) {
	b, texts := debtSetup(t, 6)
	before := len(b.emb.embedded())
	c := &clock{t: t0.Add(5 * time.Second)}
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: 10 * time.Second, Interval: 5 * time.Second, Now: c.now, BatchSize: 2}, b.store, b.emb)
	require.NoError(t, err)
	// At t0+5s, debt dated up to t0 (= now + interval − window) is due:
	// document 1's. The rate accrues half of the outstanding debt's tokens
	// (interval ÷ window), three chunks' worth of six equal ones.
	res, err := r.RepayOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, res.Repaid, "the due chunk, then three on the rate's credit")
	sent := b.emb.embedded()[before:]
	require.Equal(t, texts[1], sent[0], "the due debt goes first")
	c.set(t0.Add(10 * time.Second))
	_, err = r.RepayOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, outstanding(t, b.store).Vectors, "all repaid within the window")
	require.Len(t, b.emb.embedded()[before:], 6, "each debt embedded once")
}

// TestRepayerSaysWhenTheCapMissesTheWindow: an hourly cap below the debt
// falling due keeps it past its window; the repayment flags it (metric
// and one warning naming the settings) instead of overspending.
func TestRepayerSaysWhenTheCapMissesTheWindow(t *testing.T) {
	b, _ := debtSetup(t, 2)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	c := &clock{t: t0.Add(time.Hour)}
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: time.Minute, MaxTokensPerHour: 10, Now: c.now, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, b.store, b.emb)
	require.NoError(t, err)
	res, err := r.RepayOnce(t.Context())
	require.NoError(t, err)
	require.True(t, res.Behind)
	require.Zero(t, res.Repaid, "a chunk over the hour's cap is not sent")
	require.Equal(t, 2, res.Outstanding.DueVectors)
	require.EqualValues(t, 1, metric(t, reg, "ragsync_pipeline_debt_behind"))
	require.Contains(t, logs.String(), "reuse.repay_max_tokens_per_hour")
	require.InDelta(t, time.Hour.Seconds(), metric(t, reg, "ragsync_pipeline_debt_oldest_age_seconds"), 2)
}

// killingEmbedder embeds like countingEmbedder until kill is set, then
// cancels the context of the call it is in (a process killed while the
// request is in flight) and returns its error.
type killingEmbedder struct {
	inner  *countingEmbedder
	calls  int
	killAt int
	cancel context.CancelFunc
}

func (k *killingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	k.calls++
	if k.calls == k.killAt {
		k.cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return k.inner.Embed(ctx, texts)
}

func (k *killingEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return k.Embed(ctx, texts)
}

// barrierEmbedder holds the first n calls until all n have arrived.
type barrierEmbedder struct {
	inner *countingEmbedder
	mu    sync.Mutex
	n     int
	all   chan struct{}
}

func (e *barrierEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	if e.n > 0 {
		e.n--
		if e.n == 0 {
			close(e.all)
		}
	}
	e.mu.Unlock()
	select {
	case <-e.all:
	case <-time.After(10 * time.Second):
		return nil, errors.New("the other repayment never called")
	}
	return e.inner.Embed(ctx, texts)
}

func (e *barrierEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// countingDebtStore counts the chunk rows each RewriteVectors wrote.
type countingDebtStore struct {
	*sink.Store
	mu      sync.Mutex
	written int
}

func (s *countingDebtStore) RewriteVectors(ctx context.Context, rws []sink.Rewrite, onlyDebt bool) (int, error) {
	n, err := s.Store.RewriteVectors(ctx, rws, onlyDebt)
	s.mu.Lock()
	s.written += n
	s.mu.Unlock()
	return n, err
}

// TestRepayerKilledMidwayLosesNothingAndWritesNoVectorTwice kills a
// repayment during its second request; a restarted one finishes the job.
// Every debt is repaid, each chunk row is written exactly once, and two
// repayments racing over the same debt still write each row once.
func TestRepayerKilledMidwayLosesNothingAndWritesNoVectorTwice(t *testing.T) {
	b, _ := debtSetup(t, 5)
	store := &countingDebtStore{Store: b.store}
	c := &clock{t: t0.Add(time.Hour)} // all due
	ctx, cancel := context.WithCancel(t.Context())
	k := &killingEmbedder{inner: b.emb, killAt: 2, cancel: cancel}
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: time.Minute, Now: c.now, BatchSize: 2}, store, k)
	require.NoError(t, err)
	_, err = r.RepayOnce(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, store.written, "the first batch committed before the kill")
	require.Equal(t, 3, outstanding(t, b.store).Vectors, "the killed batch is still debt")

	// Restart: two repayments at once over what is left, both having read
	// the same debt before either writes.
	errs := make(chan error, 2)
	both := &barrierEmbedder{inner: b.emb, n: 2, all: make(chan struct{})}
	for range 2 {
		go func() {
			r2, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: time.Minute, Now: c.now, BatchSize: 3}, store, both)
			if err == nil {
				_, err = r2.RepayOnce(t.Context())
			}
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Zero(t, outstanding(t, b.store).Vectors, "nothing lost")
	require.Equal(t, 5, store.written, "no chunk row written twice")
	for i := 1; i <= 5; i++ {
		row := b.rows(t, fmt.Sprintf("public.docs/%d", i))[0]
		require.Equal(t, row.Hash, row.VectorHash, "document %d", i)
	}
}

// TestRepayerSkipsChunksEditedSince: a chunk rewritten by the pipeline
// after the repayment read it keeps what the pipeline gave it.
func TestRepayerSkipsChunksEditedSince(t *testing.T) {
	b, _ := debtSetup(t, 1)
	debts, err := b.store.NextDebt(t.Context(), t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, debts, 1)
	b.apply(t, &pipeline.ReuseConfig{Disabled: true}, event("u", 1, 100, "an entirely new text for document one"))
	n, err := b.store.RewriteVectors(t.Context(), []sink.Rewrite{{ChunkID: debts[0].ChunkID, Hash: debts[0].Hash, Text: debts[0].Text,
		Vector: make([]float32, dims)}}, true)
	require.NoError(t, err)
	require.Zero(t, n)
	row := b.rows(t, "public.docs/1")[0]
	require.Equal(t, chunker.Hash("an entirely new text for document one"), row.Hash)
}

func TestRepayerStopsImmediately(t *testing.T) {
	b := reuseSetup(t)
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Interval: time.Hour}, b.store, b.emb)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return on a cancelled context")
	}
}

func TestRepayerRespectsContextCancellation(t *testing.T) {
	b, _ := debtSetup(t, 1)
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: time.Second, Interval: 10 * time.Millisecond}, b.store, b.emb)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool { return outstanding(t, b.store).Vectors == 0 }, 10*time.Second, 10*time.Millisecond,
		"Run repays on its own")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
}

func TestDebtConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     pipeline.DebtConfig
		wantErr string
	}{
		{"zero is the default", pipeline.DebtConfig{}, ""},
		{"window too short", pipeline.DebtConfig{Window: time.Millisecond}, "reuse.repay_window"},
		{"negative cap", pipeline.DebtConfig{MaxTokensPerHour: -1}, "reuse.repay_max_tokens_per_hour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.NewRepayer(tc.cfg, &sink.Store{}, &countingEmbedder{})
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// blockingEmbedder holds each call until release is closed.
type blockingEmbedder struct {
	*countingEmbedder
	entered chan struct{}
	release chan struct{}
}

func (e blockingEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

func (e blockingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.entered != nil {
		e.entered <- struct{}{}
		<-e.release
	}
	return e.countingEmbedder.Embed(ctx, texts)
}

// TestLanesBackgroundYieldsToLive: a background call waits while a live
// call is in flight and for the quiet time after it, then goes.
func TestLanesBackgroundYieldsToLive(t *testing.T) {
	live := blockingEmbedder{countingEmbedder: &countingEmbedder{}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	l := pipeline.NewLanes(live, 50*time.Millisecond)
	go func() { _, _ = l.Live().Embed(context.Background(), []string{"live"}) }()
	<-live.entered
	bg := make(chan time.Time, 1)
	go func() {
		// The background call does not block in the embedder: entered is
		// only for the live one.
		_, err := l.Background().Embed(context.Background(), nil)
		if err == nil {
			bg <- time.Now()
		}
	}()
	select {
	case <-bg:
		t.Fatal("the background lane went while a live call was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	released := time.Now()
	close(live.release)
	select {
	case at := <-bg:
		require.GreaterOrEqual(t, at.Sub(released), 50*time.Millisecond, "waited the quiet time after the live call")
	case <-time.After(5 * time.Second):
		t.Fatal("the background lane never went")
	}
}

// TestLanesBackgroundGivesUpOnCancel: a background call waiting for the
// live lane returns its context's error when the context ends.
func TestLanesBackgroundGivesUpOnCancel(t *testing.T) {
	live := blockingEmbedder{countingEmbedder: &countingEmbedder{}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	l := pipeline.NewLanes(live, 0)
	go func() { _, _ = l.Live().Embed(context.Background(), []string{"live"}) }()
	<-live.entered
	defer close(live.release)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Background().Embed(ctx, []string{"x"})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
}

// TestRepayerLearnsFromMonitorSamples: the monitor's measurement of a
// reused vector reaches the predictor once.
func TestRepayerLearnsFromMonitorSamples(t *testing.T) {
	b, _ := debtSetup(t, 1)
	debts, err := b.store.NextDebt(t.Context(), t0, 10)
	require.NoError(t, err)
	require.Len(t, debts, 1)
	_, err = b.pool.Exec(t.Context(), "INSERT INTO "+b.schema+".monitor_samples (index_name, chunk_id, content_hash, kind, cosine_distance, l2, past_bound)"+
		" VALUES ('docs', $1, $2, 'reused', 0.3, 0.5, true)", debts[0].ChunkID, debts[0].Hash)
	require.NoError(t, err)
	pred := pipeline.NewPredictor(0)
	c := &clock{t: t0}
	r, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: time.Hour, Now: c.now, Predictor: pred, Samples: b.store}, b.store, b.emb)
	require.NoError(t, err)
	for range 2 {
		res, err := r.RepayOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, res.Repaid, "nothing due yet")
	}
	_, n := pred.Slope()
	require.EqualValues(t, 1, n, "the sample is learnt once")
}

func (k *killingEmbedder) ReportedModel() string { return "" }

func (e *barrierEmbedder) ReportedModel() string { return "" }

func (e blockingEmbedder) ReportedModel() string { return "" }
