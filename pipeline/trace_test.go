package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/pipeline"
)

// headerDLQ keeps the dead letters' headers.
type headerDLQ struct {
	mu      sync.Mutex
	headers [][]cdc.Header
}

func (d *headerDLQ) Put(_ context.Context, m cdc.Record, _ error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.headers = append(d.headers, m.Headers)
	return nil
}

// TestTracesContinueKafkaTraceparent: a Kafka message carrying a W3C
// traceparent yields decode, chunk, embed and sink spans in the producer's
// trace; a message that cannot be decoded is dead-lettered with its trace
// id in a header.
func TestTracesContinueKafkaTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	const (
		topic   = "dbserver1.public.docs"
		goodTID = "4bf92f3577b34da6a3ce929d0e0e4736"
		badTID  = "0af7651916cd43dd8448eb211c80319c"
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	good := event("c", 1, 100, paraA)
	require.NoError(t, cl.ProduceSync(t.Context(),
		&kgo.Record{Topic: topic, Key: good.Key, Value: good.Value,
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + goodTID + "-00f067aa0ba902b7-01")}}},
		&kgo.Record{Topic: topic, Key: []byte(`{"id":2}`), Value: []byte(`{not json`),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + badTID + "-b7ad6b7169203331-01")}}},
	).FirstErr())
	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "g", StopAtEnd: true})
	require.NoError(t, err)
	t.Cleanup(src.Close)

	b := setup(t)
	dlq := &headerDLQ{}
	b.runWith(t, src, dlq)

	byName := map[string]string{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == goodTID {
			byName[s.Name] = s.Parent.SpanID().String()
		}
	}
	for _, name := range []string{"ragsync.receive", "ragsync.apply", "ragsync.chunk", "ragsync.embed", "ragsync.sink.tx"} {
		require.Contains(t, byName, name, "span %s in the producer's trace (got %v)", name, byName)
	}
	require.Equal(t, "00f067aa0ba902b7", byName["ragsync.receive"], "receiving the change continues the producer's span")
	require.Equal(t, "00f067aa0ba902b7", byName["ragsync.apply"])

	require.Len(t, dlq.headers, 1)
	var tid string
	for _, h := range dlq.headers[0] {
		if h.Key == pipeline.HeaderTraceID {
			tid = string(h.Value)
		}
	}
	require.Equal(t, badTID, tid, "the dead letter names its trace")
}

func (b bundle) runWith(t *testing.T, src pipeline.Source, dlq pipeline.DeadLetters) {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Workers: 2, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t),
		DeadLetters: dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
}

func mustChunker(t *testing.T) pipeline.Splitter {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	return ch
}
