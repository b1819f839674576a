package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// backlogEpoch is the commit time the backlog tests' changes count from.
var backlogEpoch = time.Unix(1700000000, 0)

// timedSource hands over one batch of decoded changes, change i committed
// at backlogEpoch + commits[i], then stays open with nothing more (a live
// source), so the backlog is read while Run runs.
type timedSource struct {
	once    sync.Once
	records []cdc.Record
}

func newTimedSource(t *testing.T, bodies []string, commits []time.Duration) *timedSource {
	t.Helper()
	var raw []cdc.Record
	for i, body := range bodies {
		raw = append(raw, event("c", i+1, int64(10*(i+1)), body))
	}
	recs := cdc.DecodeAll(testDecoder, raw)
	for i := range recs {
		require.NotNil(t, recs[i].Change, "decoded")
		recs[i].Change.Version.TS = uint64(backlogEpoch.Add(commits[i]).UnixMilli())
	}
	return &timedSource{records: recs}
}

func (s *timedSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	var b cdc.Batch
	s.once.Do(func() { b = cdc.Batch{Records: s.records, Ack: func(context.Context) error { return nil }} })
	if b.Records != nil {
		return b, nil
	}
	<-ctx.Done()
	return cdc.Batch{}, ctx.Err()
}

// blockedIndex holds the upsert of the documents whose text contains word
// until released: Postgres busy (a lock, a slow disk) as the pipeline
// sees it.
type blockedIndex struct {
	pipeline.Index
	word    string
	release chan struct{}
	held    chan struct{}
	once    sync.Once
}

func (b *blockedIndex) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	for _, c := range d.Chunks {
		if strings.Contains(c.Text, b.word) {
			b.once.Do(func() { close(b.held) })
			select {
			case <-b.release:
			case <-ctx.Done():
				return sink.Outcome{}, ctx.Err()
			}
			break
		}
	}
	return b.Index.Upsert(ctx, d)
}

// backlogRun starts a pipeline over src writing to ix with emb, at a clock
// fixed at backlogEpoch + at, and returns it and its registry; Run is
// stopped at the end of the test.
func backlogRun(t *testing.T, b bundle, src pipeline.Source, ix pipeline.Index, emb pipeline.Embedder, cfg pipeline.Config, at time.Duration) (*pipeline.Pipeline, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.RetryBackoff, cfg.MaxRetryBackoff, cfg.Registerer = 1, 2, reg
	cfg.Settings = map[string]string{pipeline.StageEmbedder: "embedder.base_url", pipeline.StageSink: "postgres.url"}
	p, err := pipeline.New(cfg, pipeline.Stages{Source: src, Splitter: mustChunker(t), DeadLetters: b.dlq,
		Target: pipeline.Target{Name: "docs", Index: ix, Embedder: emb}})
	require.NoError(t, err)
	pipeline.SetClock(p, func() time.Time { return backlogEpoch.Add(at) })
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-ran) })
	return p, reg
}

func TestBacklogEmptyWhenNotRunning(t *testing.T) {
	b := setup(t)
	p, err := pipeline.New(pipeline.Config{}, pipeline.Stages{Source: &sliceSource{}, Splitter: mustChunker(t),
		Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb}})
	require.NoError(t, err)
	require.Equal(t, pipeline.Backlog{}, p.Backlog())
	require.NoError(t, p.Run(t.Context()))
	require.Equal(t, pipeline.Backlog{}, p.Backlog(), "drained")
}

// TestBacklogHeldByProvider: of three changes, the one whose embedding
// the provider holds is the backlog once the others are applied: one
// pending, aged from its commit, held by the provider, and the setting
// to check is the embedder's; the gauges say the same. Released, the
// backlog empties.
func TestBacklogHeldByProvider(t *testing.T) {
	b := setup(t)
	emb := &heldEmbedder{word: "glacier", release: make(chan struct{}), held: make(chan struct{})}
	src := newTimedSource(t, []string{
		"Harbours keep their lighthouses lit through the winter storms.",
		"A glacier moves slowly down the valley, carving rock as it goes.",
		"Orchards need bees in spring to set their fruit.",
	}, []time.Duration{0, 30 * time.Second, 40 * time.Second})
	p, reg := backlogRun(t, b, src, b.store, emb, pipeline.Config{}, 100*time.Second)
	<-emb.held
	require.Eventually(t, func() bool { return p.Backlog().Pending == 1 }, 30*time.Second, 5*time.Millisecond, "the other two are applied")
	got := p.Backlog()
	require.Equal(t, pipeline.Backlog{Pending: 1, OldestAge: 70 * time.Second, Stage: pipeline.BacklogProvider, Check: "embedder.base_url"}, got)
	require.Equal(t, 1.0, metric(t, reg, "ragsync_pipeline_backlog_changes"))
	require.Equal(t, 70.0, metric(t, reg, "ragsync_pipeline_backlog_oldest_seconds"))
	close(emb.release)
	require.Eventually(t, func() bool { return p.Backlog() == pipeline.Backlog{} }, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, metric(t, reg, "ragsync_pipeline_backlog_oldest_seconds"))
}

// TestBacklogHeldBySink: the change whose transaction Postgres holds is
// the backlog, held by the sink, with the index's setting to check.
func TestBacklogHeldBySink(t *testing.T) {
	b := setup(t)
	ix := &blockedIndex{Index: b.store, word: "glacier", release: make(chan struct{}), held: make(chan struct{})}
	src := newTimedSource(t, []string{
		"A glacier moves slowly down the valley, carving rock as it goes.",
		"Harbours keep their lighthouses lit through the winter storms.",
	}, []time.Duration{5 * time.Second, 0})
	p, _ := backlogRun(t, b, src, ix, b.emb, pipeline.Config{}, 65*time.Second)
	<-ix.held
	require.Eventually(t, func() bool { return p.Backlog().Pending == 1 }, 30*time.Second, 5*time.Millisecond, "the other one is applied")
	require.Equal(t, pipeline.Backlog{Pending: 1, OldestAge: time.Minute, Stage: pipeline.BacklogSink, Check: "postgres.url"}, p.Backlog())
	close(ix.release)
	require.Eventually(t, func() bool { return p.Backlog() == pipeline.Backlog{} }, 30*time.Second, 5*time.Millisecond)
}

// TestBacklogHeldAtSourceByBackPressure: with room for one document in
// flight, held by the provider, the batch's next change waits to be
// handed over; being the older, it is the oldest of the backlog, at the
// source stage, and both count as pending.
func TestBacklogHeldAtSourceByBackPressure(t *testing.T) {
	b := setup(t)
	emb := &heldEmbedder{word: "glacier", release: make(chan struct{}), held: make(chan struct{})}
	src := newTimedSource(t, []string{
		"A glacier moves slowly down the valley, carving rock as it goes.",
		"Harbours keep their lighthouses lit through the winter storms.",
	}, []time.Duration{20 * time.Second, 10 * time.Second})
	p, _ := backlogRun(t, b, src, b.store, emb, pipeline.Config{MaxInFlightDocuments: 1}, 60*time.Second)
	<-emb.held
	got := p.Backlog()
	require.Equal(t, 2, got.Pending)
	require.Equal(t, 50*time.Second, got.OldestAge)
	require.Equal(t, pipeline.BacklogSource, got.Stage)
	require.Contains(t, got.Check, "pipeline.max_in_flight_documents")
	close(emb.release)
	require.Eventually(t, func() bool { return p.Backlog() == pipeline.Backlog{} }, 30*time.Second, 5*time.Millisecond)
}

// TestBacklogCountsFromFetchWithoutCommitTime: a snapshot read carries
// the snapshot's time, not a commit's: its age counts from its fetch.
func TestBacklogCountsFromFetchWithoutCommitTime(t *testing.T) {
	b := setup(t)
	emb := &heldEmbedder{word: "glacier", release: make(chan struct{}), held: make(chan struct{})}
	src := newTimedSource(t, []string{"A glacier moves slowly down the valley, carving rock as it goes."}, []time.Duration{-time.Hour})
	src.records[0].Change.Version.Snapshot = true
	p, _ := backlogRun(t, b, src, b.store, emb, pipeline.Config{}, 0)
	<-emb.held
	got := p.Backlog()
	require.Equal(t, pipeline.Backlog{Pending: 1, Stage: pipeline.BacklogProvider, Check: "embedder.base_url"}, got,
		"fetched on the fixed clock: age 0, not the hour since the snapshot's time")
	close(emb.release)
	require.Eventually(t, func() bool { return p.Backlog().Pending == 0 }, 30*time.Second, 5*time.Millisecond)
}
