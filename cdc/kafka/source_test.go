package kafka_test

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
	"github.com/ragsync/ragsync/cdc/kafka"
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

func (b *kafkaBundle) source(t *testing.T, cfg kafka.Config) *kafka.Source {
	t.Helper()
	cfg.Brokers, cfg.Topics = b.brokers, []string{b.topic}
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	s, err := kafka.NewSource(cfg)
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

func offsets(msgs []cdc.Record) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Offset)
	}
	return out
}

func TestKafkaSourceByteBudgetCommitsContiguousPrefix(t *testing.T) {
	b := kafkaSetup(t, 1, 10, 100)
	src := b.source(t, kafka.Config{MaxPollBytes: 250})
	ctx := t.Context()

	// Wait for the first records (the group join takes a moment).
	var b1 cdc.Batch
	for len(b1.Records) == 0 {
		var err error
		b1, err = src.Fetch(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []int64{0, 1}, offsets(b1.Records), "250 bytes hold two 101-byte records")
	require.Empty(t, b.committed(t, "g"), "nothing committed before Ack")
	require.NoError(t, b1.Ack(ctx))
	require.Equal(t, map[int32]int64{0: 2}, b.committed(t, "g"))

	// The pipeline fetches before it acknowledges: b2 and b3 are out at
	// once, and each Ack commits only up to its own batch.
	b2, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, offsets(b2.Records))
	b3, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{4, 5}, offsets(b3.Records))
	require.Equal(t, b2.Lane, b3.Lane, "one partition is one lane")
	require.Equal(t, map[int32]int64{0: 2}, b.committed(t, "g"), "nothing past an unacknowledged batch")
	require.NoError(t, b2.Ack(ctx))
	require.Equal(t, map[int32]int64{0: 4}, b.committed(t, "g"))
	require.NoError(t, b3.Ack(ctx))
	require.Equal(t, map[int32]int64{0: 6}, b.committed(t, "g"))

	// b4 is never acknowledged (a crash): the next member of the group
	// starts at its first record.
	b4, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{6, 7}, offsets(b4.Records))
	src.Close()
	again := b.source(t, kafka.Config{MaxPollBytes: 250})
	var b5 cdc.Batch
	for len(b5.Records) == 0 {
		b5, err = again.Fetch(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int64(6), b5.Records[0].Offset, "unacknowledged records are redelivered")
}

// TestKafkaSourceLanesArePartitions: each batch holds one partition's
// records and names it in Lane; acknowledging one partition's batch commits
// that partition only.
func TestKafkaSourceLanesArePartitions(t *testing.T) {
	b := kafkaSetup(t, 3, 30, 10)
	src := b.source(t, kafka.Config{MaxPollRecords: 100})
	ctx := t.Context()
	byLane := map[string]cdc.Batch{}
	for len(byLane) < 3 {
		bt, err := src.Fetch(ctx)
		require.NoError(t, err)
		if len(bt.Records) == 0 {
			continue
		}
		part := bt.Records[0].Partition
		for _, m := range bt.Records {
			require.Equal(t, part, m.Partition, "a batch holds one partition")
		}
		require.Equal(t, fmt.Sprintf("%s/%d", b.topic, part), bt.Lane)
		require.NotContains(t, byLane, bt.Lane)
		byLane[bt.Lane] = bt
	}
	one := byLane[b.topic+"/1"]
	require.NoError(t, one.Ack(ctx))
	require.Equal(t, map[int32]int64{1: one.Records[len(one.Records)-1].Offset + 1}, b.committed(t, "g"))
}

func TestKafkaSourceOversizedRecordIsItsOwnBatch(t *testing.T) {
	b := kafkaSetup(t, 1, 3, 1000)
	src := b.source(t, kafka.Config{MaxPollBytes: 10})
	var got [][]int64
	for len(got) < 3 {
		bt, err := src.Fetch(t.Context())
		require.NoError(t, err)
		if len(bt.Records) > 0 {
			got = append(got, offsets(bt.Records))
		}
		require.NoError(t, bt.Ack(t.Context()))
	}
	require.Equal(t, [][]int64{{0}, {1}, {2}}, got)
}

func TestKafkaLagCollector(t *testing.T) {
	b := kafkaSetup(t, 2, 20, 10)
	src := b.source(t, kafka.Config{MaxPollRecords: 4})
	reg := prometheus.NewRegistry()
	reg.MustRegister(kafka.NewLagCollector(src))
	bt, err := src.Fetch(t.Context())
	for err == nil && len(bt.Records) == 0 {
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
	require.EqualValues(t, 20-len(bt.Records), total)
	require.Equal(t, 2, testutil.CollectAndCount(reg, "ragsync_kafka_consumer_lag_records"))
}

// TestKafkaRebalanceWaitsForAck: a member holding unacknowledged batches of
// both partitions while another joins must not let a partition move before
// its Ack (the revoke waits for it), so the newcomer starts after what was
// committed and no record is delivered twice.
func TestKafkaRebalanceWaitsForAck(t *testing.T) {
	const n = 400
	b := kafkaSetup(t, 2, n, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	fast := []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)} // rebalance promptly
	a := b.source(t, kafka.Config{Group: "rb", MaxPollRecords: 50, Opts: fast})

	dctx, stop := context.WithCancel(ctx) // ends the drains once all is seen
	defer stop()
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	record := func(msgs []cdc.Record) {
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

	// a holds one batch of each partition: whichever partition the
	// rebalance gives b has a batch out.
	var held []cdc.Batch
	lanes := map[string]bool{}
	for len(lanes) < 2 {
		bt, err := a.Fetch(ctx)
		require.NoError(t, err)
		if len(bt.Records) == 0 {
			continue
		}
		record(bt.Records)
		held = append(held, bt)
		lanes[bt.Lane] = true
	}

	bsrc := b.source(t, kafka.Config{Group: "rb", MaxPollRecords: 50, Opts: fast})
	var wg sync.WaitGroup
	drain := func(s *kafka.Source) {
		defer wg.Done()
		for !done() && dctx.Err() == nil {
			bt, err := s.Fetch(dctx)
			if err != nil {
				return
			}
			record(bt.Records)
			if bt.Ack != nil {
				if err := bt.Ack(ctx); err != nil {
					return
				}
			}
		}
	}
	wg.Add(1)
	go drain(bsrc)
	// Give the rebalance time to try to move a partition to b. With the
	// revoke waiting for a's batches, b gets none; without, it would
	// within a few heartbeats (and then re-read a's uncommitted batch).
	// Not an assertion.
	for range 20 {
		if lag, _ := bsrc.Lag(ctx); len(lag) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	lag, err := bsrc.Lag(ctx)
	require.NoError(t, err)
	require.Empty(t, lag, "a partition moved to b while a held an unacknowledged batch of it")
	for _, bt := range held {
		require.NoError(t, bt.Ack(ctx))
	}
	wg.Add(1)
	go drain(a)
	wg.Wait()
	require.NoError(t, ctx.Err(), "drained %d of %d", len(seen), n)
	for k, c := range seen {
		require.Equal(t, 1, c, "record %s delivered %d times", k, c)
	}
	require.Equal(t, n, total)
}

// TestKafkaRevokeTimeoutLetsGoAndLateAckCommitsNothing: a batch that is
// never acknowledged holds its partition only for RevokeTimeout; its late
// Ack then commits nothing, since the partition has another owner.
func TestKafkaRevokeTimeoutLetsGoAndLateAckCommitsNothing(t *testing.T) {
	b := kafkaSetup(t, 2, 40, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	fast := []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	a := b.source(t, kafka.Config{Group: "rt", MaxPollRecords: 5, RevokeTimeout: 500 * time.Millisecond, Opts: fast})
	held := map[string]cdc.Batch{}
	for len(held) < 2 {
		bt, err := a.Fetch(ctx)
		require.NoError(t, err)
		if len(bt.Records) > 0 && held[bt.Lane].Ack == nil {
			held[bt.Lane] = bt
		}
	}
	bsrc := b.source(t, kafka.Config{Group: "rt", MaxPollRecords: 5, Opts: fast})
	go func() {
		for ctx.Err() == nil {
			if _, err := bsrc.Fetch(ctx); err != nil {
				return
			}
		}
	}()
	var moved []int32
	require.Eventually(t, func() bool {
		lag, _ := bsrc.Lag(ctx)
		moved = moved[:0]
		for _, ps := range lag {
			for p := range ps {
				moved = append(moved, p)
			}
		}
		return len(moved) > 0
	}, 30*time.Second, 50*time.Millisecond, "the partition moves once RevokeTimeout passed")
	lane := fmt.Sprintf("%s/%d", b.topic, moved[0])
	require.NoError(t, held[lane].Ack(ctx), "a late Ack is not an error")
	_, committed := b.committed(t, "rt")[moved[0]]
	require.False(t, committed, "a late Ack commits nothing for a partition another member owns")
}
