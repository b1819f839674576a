package service

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// TestKafkaLagFeedsMonitor: serve's adapter from the Kafka source to the
// monitor reports, against a kfake cluster with a known backlog, the
// records behind per partition exactly; through the monitor, seconds of
// lag that grow with the backlog and a recommended replica count bounded
// by the partitions; and a topic that does not exist is an error, not zero
// partitions.
func TestKafkaLagFeedsMonitor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const topic = "dbserver1.public.lag"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	backlog := map[int32]int64{0: 30, 1: 20, 2: 10}
	produce := func(per map[int32]int64) {
		t.Helper()
		var recs []*kgo.Record
		for p, n := range per {
			for range n {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(`{}`)})
			}
		}
		require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())
	}
	produce(backlog)

	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "lag", MaxPollRecords: 1})
	require.NoError(t, err)
	t.Cleanup(src.Close)
	// One fetch joins the group and takes every partition; nothing is
	// acknowledged, so the whole backlog is behind.
	_, err = src.Fetch(ctx)
	require.NoError(t, err)
	lag := kafkaLag{src: src, topics: []string{topic}}
	got, err := lag.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]map[int32]int64{topic: backlog}, got, "records behind per partition = the backlog")
	parts, err := lag.Partitions(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, parts)
	_, err = kafkaLag{src: src, topics: []string{"no.such.topic"}}.Partitions(ctx)
	require.Error(t, err, "an unknown topic must not read as zero partitions")

	// Through the monitor: a clock and a changes counter set the
	// throughput (1 change/s) the seconds of lag are estimated from.
	pool, schema := pgtest.Schema(t)
	emb := embedder.NewHashing(32)
	_, err = sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "lag", Model: emb.Model(), Dimensions: emb.Dimensions()})
	require.NoError(t, err)
	gather := prometheus.NewRegistry()
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ragsync_pipeline_changes_total"}, []string{"op", "outcome"})
	gather.MustRegister(changes)
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	minute := func() {
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		changes.WithLabelValues("u", "applied").Add(60)
	}
	reg := prometheus.NewRegistry()
	m, err := monitor.New(ctx, monitor.Config{SampleSize: -1, Interval: time.Minute, Registerer: reg, Logger: slog.New(slog.DiscardHandler)},
		monitor.Deps{Pool: pool, Schema: schema, Index: "lag", Embedder: emb, Gatherer: gather, Lag: lag, Now: clock})
	require.NoError(t, err)
	_, err = m.Check(ctx, monitor.CheckOptions{NoPublish: true}) // the throughput's starting point
	require.NoError(t, err)

	minute()
	st1, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	require.NotNil(t, st1.Lag)
	require.EqualValues(t, 60, st1.Lag.TotalRecords)
	produce(map[int32]int64{0: 30, 1: 30, 2: 30})
	minute()
	st2, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	require.EqualValues(t, 150, st2.Lag.TotalRecords)
	for p, n := range map[int32]int64{0: 60, 1: 50, 2: 40} {
		pl := st2.Lag.Partitions[topic][p]
		require.Equal(t, n, pl.Records, "partition %d", p)
		require.Greater(t, pl.Seconds, st1.Lag.Partitions[topic][p].Seconds, "partition %d: seconds of lag grow with its backlog", p)
		require.InDelta(t, float64(n)*3, pl.Seconds, 1e-9, "partition %d: records over its third of 1 change/s", p)
		require.Equal(t, float64(n), gaugeValue(t, reg, "ragsync_monitor_lag_records", p))
	}
	require.Positive(t, st2.Lag.SlopePerSecond)
	// Unbounded, draining 1,500 predicted records in 5 minutes at 1/s
	// would take 8 replicas; there are 3 partitions.
	require.Equal(t, 3, st2.Lag.Recommended, "recommended replicas are bounded by the partition count")
	require.Equal(t, 3.0, gaugeValue(t, reg, "ragsync_monitor_recommended_replicas", -1))
}

// gaugeValue reads a gauge series of reg by name (and partition label,
// unless part is negative).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, part int32) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := part < 0
			for _, l := range m.GetLabel() {
				ok = ok || l.GetName() == "partition" && l.GetValue() == strconv.Itoa(int(part))
			}
			if ok {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{partition=%d}", name, part)
	return 0
}
