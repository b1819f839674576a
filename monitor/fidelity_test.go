package monitor_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/internal/redistest"
	"github.com/ragsync/ragsync/monitor"
)

// TestSilentModelSwap: the API starts answering with another model behind
// the same name. The first check after the swap raises the fidelity alarm,
// and fused events with exceeded: true reach both the Kafka topic and the
// Redis stream.
func TestSilentModelSwap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		b.upsert(t, string(rune('a'+i)), 1, "alpha beta gamma "+string(rune('a'+i)), "delta epsilon zeta "+string(rune('a'+i)))
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ragsync.monitor"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	rdb, prefix := redistest.Client(t)
	stream := prefix + ":monitor"
	m := b.monitor(t, monitor.Config{SampleSize: 8},
		monitor.KafkaPublisher{Client: kc, Topic: "ragsync.monitor"},
		monitor.RedisPublisher{Client: rdb, Stream: stream, MaxLen: 100})
	ctx := ctxT(t)

	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.False(t, st.Breach, "before the swap: %+v", st.Fidelity)

	b.srv.SetTransform(swap)
	st, err = m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.True(t, st.Breach)
	canary := findEvent(t, st.Events, monitor.TagFidelity, "canary_p50_cosine")
	require.True(t, canary.Signal.Exceeded)
	require.True(t, canary.Changed, "the alarm flipped at this check")
	require.Greater(t, canary.Signal.Score, 0.5)

	// Kafka: the second check's canary event says exceeded.
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("ragsync.monitor"))
	require.NoError(t, err)
	t.Cleanup(cons.Close)
	var fromKafka []monitor.Event
	for len(fromKafka) < 2*len(st.Events) {
		fs := cons.PollFetches(ctx)
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) {
			var e monitor.Event
			require.NoError(t, json.Unmarshal(r.Value, &e))
			fromKafka = append(fromKafka, e)
		})
	}
	require.True(t, exceededCanary(fromKafka), "no exceeded canary event on the Kafka topic")
	require.Equal(t, monitor.EventSchema, fromKafka[0].Schema)

	// Redis: the same events on the stream.
	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	var fromRedis []monitor.Event
	for _, x := range msgs {
		var e monitor.Event
		require.NoError(t, json.Unmarshal([]byte(x.Values["event"].(string)), &e))
		fromRedis = append(fromRedis, e)
	}
	require.Len(t, fromRedis, len(fromKafka))
	require.True(t, exceededCanary(fromRedis), "no exceeded canary event on the Redis stream")
}

// TestNoSwapNoAlarm: with only provider noise, 20 checks give no alarm.
func TestNoSwapNoAlarm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		b.upsert(t, string(rune('a'+i)), 1, "alpha beta gamma "+string(rune('a'+i)))
	}
	var seed uint64 = 42
	var mu sync.Mutex
	nz := noise(&seed)
	b.srv.SetTransform(func(model, text string, v []float32) []float32 {
		mu.Lock()
		defer mu.Unlock()
		return nz(model, text, v)
	})
	m := b.monitor(t, monitor.Config{SampleSize: 4})
	ctx := ctxT(t)
	worst := 0.0
	for range 20 {
		st, err := m.Check(ctx, monitor.CheckOptions{})
		require.NoError(t, err)
		require.False(t, st.Breach, "%+v", st.Events)
		for _, a := range st.Fidelity {
			worst = max(worst, a.Max)
		}
	}
	require.Positive(t, worst, "the noise must be visible, or the test proves nothing")
	t.Logf("20 checks under noise: 0 alarms, worst cosine distance %.2g (bound 0.05)", worst)
}

func findEvent(t *testing.T, evs []monitor.Event, tag, method string) monitor.Event {
	t.Helper()
	for _, e := range evs {
		if e.SemanticTag == tag && e.Signal.Method == method {
			return e
		}
	}
	t.Fatalf("no %s/%s event in %d", tag, method, len(evs))
	return monitor.Event{}
}

func exceededCanary(evs []monitor.Event) bool {
	for _, e := range evs {
		if e.SemanticTag == monitor.TagFidelity && e.Signal.Method == "canary_p50_cosine" && e.Signal.Exceeded {
			return true
		}
	}
	return false
}
