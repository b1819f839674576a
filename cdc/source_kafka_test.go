package cdc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
)

type kafkaBundle struct {
	brokers []string
	topic   string
	cl      *kgo.Client
	adm     *kadm.Client
}

// kafkaSetup starts a kfake cluster with topic of parts partitions holding n
// records of about size bytes each, spread round-robin over partitions.
func kafkaSetup(t *testing.T, parts, n, size int) *kafkaBundle {
	t.Helper()
	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(parts), topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf("%06d", i) + strings.Repeat("x", max(size-6, 0))
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(v)})
	}
	if n > 0 {
		require.NoError(t, cl.ProduceSync(t.Context(), recs...).FirstErr())
	}
	return &kafkaBundle{brokers: c.ListenAddrs(), topic: topic, cl: cl, adm: kadm.NewClient(cl)}
}

func (b *kafkaBundle) source(t *testing.T, cfg cdc.KafkaConfig) *cdc.KafkaSource {
	t.Helper()
	cfg.Brokers, cfg.Topics = b.brokers, []string{b.topic}
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	s, err := cdc.NewKafkaSource(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// committed returns the group's committed offset per partition (absent: none).
func (b *kafkaBundle) committed(t *testing.T, group string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	resp, err := b.adm.FetchOffsets(t.Context(), group)
	require.NoError(t, err)
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

func offsets(msgs []cdc.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Offset)
	}
	return out
}

func TestKafkaSourceByteBudgetCommitsContiguousPrefix(t *testing.T) {
	b := kafkaSetup(t, 1, 10, 100)
	src := b.source(t, cdc.KafkaConfig{MaxPollBytes: 250})
	ctx := t.Context()

	// Wait for the first records (the group join takes a moment).
	var b1 cdc.Batch
	for len(b1.Messages) == 0 {
		var err error
		b1, err = src.Fetch(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []int64{0, 1}, offsets(b1.Messages), "250 bytes hold two 101-byte records")
	require.Empty(t, b.committed(t, "g"), "nothing committed before Ack")
	require.NoError(t, b1.Ack(ctx))
	require.Equal(t, map[int32]int64{0: 2}, b.committed(t, "g"))

	b2, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, offsets(b2.Messages))
	// b2 fails (no Ack): the next Fetch redelivers from its first record,
	// so a later Ack can never commit past it.
	b3, err := src.Fetch(ctx)
	require.NoError(t, err)
	for len(b3.Messages) == 0 {
		b3, err = src.Fetch(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), b3.Messages[0].Offset, "unacknowledged records are redelivered")
	require.Equal(t, map[int32]int64{0: 2}, b.committed(t, "g"))
	require.NoError(t, b3.Ack(ctx))
	require.Equal(t, map[int32]int64{0: 4}, b.committed(t, "g"))
}

func TestKafkaSourceOversizedRecordIsItsOwnBatch(t *testing.T) {
	b := kafkaSetup(t, 1, 3, 1000)
	src := b.source(t, cdc.KafkaConfig{MaxPollBytes: 10})
	var got [][]int64
	for len(got) < 3 {
		bt, err := src.Fetch(t.Context())
		require.NoError(t, err)
		if len(bt.Messages) > 0 {
			got = append(got, offsets(bt.Messages))
		}
		require.NoError(t, bt.Ack(t.Context()))
	}
	require.Equal(t, [][]int64{{0}, {1}, {2}}, got)
}

func TestKafkaLagCollector(t *testing.T) {
	b := kafkaSetup(t, 2, 20, 10)
	src := b.source(t, cdc.KafkaConfig{MaxPollRecords: 4})
	reg := prometheus.NewRegistry()
	reg.MustRegister(cdc.NewLagCollector(src))
	bt, err := src.Fetch(t.Context())
	for err == nil && len(bt.Messages) == 0 {
		bt, err = src.Fetch(t.Context())
	}
	require.NoError(t, err)
	require.NoError(t, bt.Ack(t.Context()))
	lag, err := src.Lag(t.Context())
	require.NoError(t, err)
	var total int64
	for _, ps := range lag {
		for _, n := range ps {
			total += n
		}
	}
	require.Len(t, lag[b.topic], 2, "both partitions reported, committed or not")
	require.EqualValues(t, 20-len(bt.Messages), total)
	require.Equal(t, 2, testutil.CollectAndCount(reg, "ragsync_kafka_consumer_lag_records"))
}

// TestKafkaRebalanceWaitsForAck: a member holding an unacknowledged batch
// while another joins must not let the partitions move before its Ack, so
// the newcomer starts after what was committed and no record is delivered
// twice.
func TestKafkaRebalanceWaitsForAck(t *testing.T) {
	const n = 400
	b := kafkaSetup(t, 4, n, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	fast := []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)} // rebalance promptly
	a := b.source(t, cdc.KafkaConfig{Group: "rb", MaxPollRecords: 50, Opts: fast})

	dctx, stop := context.WithCancel(ctx) // ends the drains once all is seen
	defer stop()
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	record := func(who string, msgs []cdc.Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seen[fmt.Sprintf("%d@%d", m.Partition, m.Offset)]++
			total++
		}
		if len(seen) >= n {
			stop()
		}
	}
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= n }

	first, err := a.Fetch(ctx)
	for err == nil && len(first.Messages) == 0 {
		first, err = a.Fetch(ctx)
	}
	require.NoError(t, err)
	record("a", first.Messages)

	// b joins while a holds its batch; a acknowledges only after b's join
	// is under way.
	bsrc := b.source(t, cdc.KafkaConfig{Group: "rb", MaxPollRecords: 50, Opts: fast})
	var wg sync.WaitGroup
	drain := func(who string, s *cdc.KafkaSource) {
		defer wg.Done()
		for !done() && dctx.Err() == nil {
			bt, err := s.Fetch(dctx)
			if err != nil {
				return
			}
			record(who, bt.Messages)
			if err := bt.Ack(ctx); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go drain("b", bsrc)
	// Give the rebalance time to try to move partitions to b. With the
	// rebalance held, b gets none; without, it would within a few heartbeats
	// (and then re-read a's uncommitted batch). Not an assertion.
	for range 20 {
		if lag, _ := bsrc.Lag(ctx); len(lag) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	lag, err := bsrc.Lag(ctx)
	require.NoError(t, err)
	require.Empty(t, lag, "partitions moved to b while a held an unacknowledged batch")
	require.NoError(t, first.Ack(ctx))
	wg.Add(1)
	go drain("a", a)
	wg.Wait()
	require.NoError(t, ctx.Err(), "drained %d of %d", len(seen), n)
	for k, c := range seen {
		require.Equal(t, 1, c, "record %s delivered %d times", k, c)
	}
	require.Equal(t, n, total)
}
