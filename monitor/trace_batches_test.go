package monitor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
)

type permanentErr struct{}

func (permanentErr) Error() string   { return "poisoned text" }
func (permanentErr) Permanent() bool { return true }

// slowPoisonEmbedder embeds through the fake API, sleeps on texts that
// say "slow" and fails permanently on texts that say "poison".
type slowPoisonEmbedder struct {
	next pipeline.Embedder
	slow time.Duration
}

func (e slowPoisonEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	for _, s := range texts {
		if strings.Contains(s, "poison") {
			return nil, permanentErr{}
		}
		if strings.Contains(s, "slow") {
			time.Sleep(e.slow)
		}
	}
	return e.next.Embed(ctx, texts)
}

func (e slowPoisonEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

type countDLQ struct {
	mu sync.Mutex
	n  int
}

func (d *countDLQ) Put(context.Context, cdc.Record, error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	return nil
}

func traceparent(tid string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + tid + "-00f067aa0ba902b7-01")}}
}

// TestEventsNameWorstTraces: the monitor records every change the
// pipeline applied from Kafka messages carrying a traceparent (no tracer
// provider installed: the producer's trace id is carried anyway), and its
// fused events name the failed changes (one undecodable, one whose
// embedding fails for good) and the slowest one, and none of the fast
// changes beyond the list's bound. Untraced messages are not named.
func TestEventsNameWorstTraces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	const topic = "dbserver1.public.docs"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	tid := func(i int) string { return fmt.Sprintf("%032x", 0xabc000+i) }
	var recs []*kgo.Record
	add := func(i int, body string) {
		m := debeziumtest.Message("docs", "c", i, int64(100+i), map[string]any{"body": body})
		recs = append(recs, &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value, Headers: traceparent(tid(i))})
	}
	const fast = 12
	for i := range fast {
		add(i, fmt.Sprintf("an ordinary document number %d about tide pools and anemones", i))
	}
	const slowID, poisonID, badID = 20, 21, 22
	add(slowID, "a slow document about sourdough starters")
	add(poisonID, "a poison document about bicycle chains")
	recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(`{"id":22}`), Value: []byte(`{not json`), Headers: traceparent(tid(badID))})
	untraced := debeziumtest.Message("docs", "c", 30, 130, map[string]any{"body": "an untraced slow document about rivers"})
	recs = append(recs, &kgo.Record{Topic: topic, Key: untraced.Key, Value: untraced.Value})
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	m := b.monitor(t, monitor.Config{SampleSize: -1, Interval: time.Hour})
	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "g", StopAtEnd: true})
	require.NoError(t, err)
	t.Cleanup(src.Close)
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	dlq := &countDLQ{}
	p, err := pipeline.New(pipeline.Config{Workers: 4, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: ch, DeadLetters: dlq, Traces: m,
		Target: pipeline.Target{Name: "docs", Index: b.st, Embedder: slowPoisonEmbedder{next: b.emb, slow: time.Second}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(ctx))
	require.Equal(t, 2, dlq.n, "the undecodable and the poisoned message are dead-lettered")

	st, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	require.NotEmpty(t, st.Events)
	ids := st.Events[0].TraceIDs
	t.Logf("trace ids in the event: %v", ids)
	require.Len(t, ids, 5, "the list is bounded")
	require.ElementsMatch(t, []string{tid(poisonID), tid(badID)}, ids[:2], "failed changes come first")
	require.Equal(t, tid(slowID), ids[2], "then the slowest")
	for _, e := range st.Events {
		require.Equal(t, ids, e.TraceIDs, "every event of a check carries the same traces")
	}
	named := 0
	for i := range fast {
		if slices.Contains(ids, tid(i)) {
			named++
		}
	}
	require.Equal(t, 2, named, "two fast changes fill the list; the other %d are left out", fast-2)
}

// TestWorstTracesAge: a trace is named at the two checks after it was
// recorded, then dropped, so an old slow change does not hide newer ones.
func TestWorstTracesAge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	m := b.monitor(t, monitor.Config{SampleSize: -1, Interval: time.Hour})
	id := func(i byte) (t [16]byte) { t[15] = i; return t }
	hex := func(i byte) string { return fmt.Sprintf("%032x", i) }
	check := func() []string {
		t.Helper()
		st, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
		require.NoError(t, err)
		return st.Events[0].TraceIDs
	}
	m.RecordTrace(id(1), time.Hour, false) // very slow
	m.RecordTrace([16]byte{}, time.Hour, true)
	require.Equal(t, []string{hex(1)}, check(), "an invalid (all-zero) trace id is not recorded")

	for i := byte(2); i < 2+7; i++ {
		m.RecordTrace(id(i), time.Duration(i)*time.Millisecond, false)
	}
	m.RecordTrace(id(3), time.Millisecond, false) // a faster retry of 3 keeps its worst
	require.Equal(t, []string{hex(1), hex(8), hex(7), hex(6), hex(5)}, check(), "still named at the second check")

	m.RecordTrace(id(40), 3*time.Millisecond, false)
	require.Equal(t, []string{hex(8), hex(7), hex(6), hex(5), hex(4)}, check(), "the old slow change left; the newer ones are ranked by time")
	require.Equal(t, []string{hex(40)}, check())
	require.Equal(t, []string{}, check(), "nothing recorded, nothing named")
}

func (e slowPoisonEmbedder) ReportedModel() string { return "" }
