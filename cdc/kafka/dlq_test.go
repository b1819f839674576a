package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
)

// dlqSetup starts a kfake cluster with the source topic, and dead-letters n
// messages to its dead-letter topic through KafkaDeadLetters (the shape the
// pipeline writes).
func dlqSetup(t *testing.T, n int) (*kgo.Client, string, string) {
	t.Helper()
	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	dl := kafka.NewDeadLetters(cl, "", "test")
	for i := range n {
		m := cdc.Record{Raw: cdc.Raw{Topic: topic, Partition: int32(i % 2), Offset: int64(100 + i), Key: []byte(fmt.Sprintf(`{"id":%d}`, i)), Value: []byte(fmt.Sprintf(`{"bad":%d`, i)), Timestamp: time.UnixMilli(1700000000000), Headers: []cdc.Header{{Key: "traceparent", Value: []byte("00-abc-def-01")}}}}
		require.NoError(t, dl.Put(t.Context(), m, &cdc.DecodeError{Coord: cdc.Coord{Topic: topic, Offset: m.Offset}, Reason: "invalid JSON"}))
	}
	return cl, topic, topic + kafka.DLQSuffix
}

func consumeAll(t *testing.T, cl *kgo.Client, topic string, want int) []*kgo.Record {
	t.Helper()
	rd, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer rd.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := rd.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d records", len(out), want)
		out = append(out, fs.Records()...)
	}
	// Nothing more than wanted: a short second poll must come back empty.
	short, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	out = append(out, rd.PollFetches(short).Records()...)
	return out
}

func TestDLQList(t *testing.T) {
	cl, topic, dlq := dlqSetup(t, 5)
	all, err := kafka.NewDeadLetterTopic(cl, dlq, "").List(t.Context(), 0)
	require.NoError(t, err)
	require.Len(t, all, 5)
	for _, d := range all {
		require.Equal(t, topic, d.OrigTopic)
		require.Equal(t, "ragsync.cdc.DecodeError", d.ErrorClass)
		require.Contains(t, d.ErrorMessage, "invalid JSON")
		require.GreaterOrEqual(t, d.OrigOffset, int64(100))
		require.Contains(t, string(d.Value), `{"bad":`)
	}
	two, err := kafka.NewDeadLetterTopic(cl, dlq, "").List(t.Context(), 2)
	require.NoError(t, err)
	require.Len(t, two, 2)

	plain, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...))
	require.NoError(t, err)
	defer plain.Close()
	_, err = kafka.NewDeadLetterTopic(plain, "no-such-topic", "").List(t.Context(), 0)
	require.Error(t, err, "a missing topic is an error, not an empty list")
}

func TestDLQReplayOnceThenNothing(t *testing.T) {
	cl, topic, dlq := dlqSetup(t, 4)
	n, err := kafka.NewDeadLetterTopic(cl, dlq, "").Replay(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, n)

	recs := consumeAll(t, cl, topic, 4)
	require.Len(t, recs, 4, "replayed records on the original topic")
	for _, r := range recs {
		require.Contains(t, string(r.Value), `{"bad":`)
		require.Len(t, r.Headers, 1, "reason headers stripped, original kept: %v", r.Headers)
		require.Equal(t, "traceparent", r.Headers[0].Key)
	}

	// The replay group's offsets make a second replay a no-op…
	n, err = kafka.NewDeadLetterTopic(cl, dlq, "").Replay(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)

	// …while new dead letters are replayed, to an explicit topic this time.
	dl := kafka.NewDeadLetters(cl, dlq, "test")
	require.NoError(t, dl.Put(t.Context(), cdc.Record{Raw: cdc.Raw{Topic: topic, Value: []byte("late")}}, errors.New("boom")))
	other := "replay-target"
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: other, Value: []byte("seed")}).FirstErr())
	n, err = kafka.NewDeadLetterTopic(cl, dlq, other).Replay(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := consumeAll(t, cl, other, 2)
	require.Len(t, got, 2)
	require.Equal(t, "late", string(got[1].Value))
}

func TestDLQReplayWithoutOriginTopicFails(t *testing.T) {
	cl, _, dlq := dlqSetup(t, 0)
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: dlq, Value: []byte("x")}).FirstErr())
	_, err := kafka.NewDeadLetterTopic(cl, dlq, "").Replay(t.Context())
	require.ErrorContains(t, err, cdc.HeaderErrTopic)
}

func TestDLQPurge(t *testing.T) {
	cl, _, dlq := dlqSetup(t, 3)
	n, err := kafka.NewDeadLetterTopic(cl, dlq, "").Purge(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	left, err := kafka.NewDeadLetterTopic(cl, dlq, "").List(t.Context(), 0)
	require.NoError(t, err)
	require.Empty(t, left)
	// Purging an empty topic deletes nothing, and replay after purge has nothing.
	n, err = kafka.NewDeadLetterTopic(cl, dlq, "").Purge(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)
	replayed, err := kafka.NewDeadLetterTopic(cl, dlq, "").Replay(t.Context())
	require.NoError(t, err)
	require.Zero(t, replayed)
}
