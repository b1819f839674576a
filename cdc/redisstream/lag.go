package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The lag metrics: what an autoscaler or an alert reads.
var (
	lagDesc = prometheus.NewDesc("ragsync_redis_stream_lag_records",
		"Entries of the stream not yet delivered to ragsync's consumer group (XINFO GROUPS lag; Redis 7 or later).",
		[]string{"stream"}, nil)
	pendingDesc = prometheus.NewDesc("ragsync_redis_stream_pending_records",
		"Entries delivered to ragsync's consumer group and not yet acknowledged: read, and not yet applied.",
		[]string{"stream"}, nil)
)

// GroupLag is how far the group is behind on one stream.
type GroupLag struct {
	// Lag is the entries not yet delivered to the group; -1 when Redis
	// cannot tell (before Redis 7, or after entries were deleted from the
	// middle of the stream).
	Lag int64
	// Pending is the entries delivered and not yet acknowledged.
	Pending int64
}

// GroupLag returns, per configured stream that exists and has the group,
// the group's lag and pending entries (XINFO GROUPS).
func (s *Source) GroupLag(ctx context.Context) (map[string]GroupLag, error) {
	out := map[string]GroupLag{}
	for _, name := range s.cfg.Streams {
		n, err := s.rdb.Exists(ctx, name).Result()
		if err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", name, err)
		}
		if n == 0 {
			continue // not written yet
		}
		groups, err := s.rdb.XInfoGroups(ctx, name).Result()
		if err != nil {
			return nil, fmt.Errorf("read the groups of stream %s (XINFO GROUPS): %w", name, err)
		}
		for _, g := range groups {
			if g.Name != s.cfg.Group {
				continue
			}
			l := GroupLag{Lag: g.Lag, Pending: g.Pending}
			if !s.lagKnown {
				l.Lag = -1 // the reply has no lag field, which go-redis reads as 0
			}
			out[name] = l
		}
	}
	return out, nil
}

// Lag returns the records behind per stream, in the monitor's shape (one
// partition, 0, per stream): entries not yet delivered plus entries not
// yet applied, like a Kafka group's end offset minus its committed one. A
// stream whose lag Redis cannot tell is left out rather than understated.
func (s *Source) Lag(ctx context.Context) (map[string]map[int32]int64, error) {
	gl, err := s.GroupLag(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	for name, l := range gl {
		if l.Lag >= 0 {
			out[name] = map[int32]int64{0: l.Lag + l.Pending}
		}
	}
	return out, nil
}

// Partitions is the number of streams: each is read in order by one
// member, so it bounds the members that help (the monitor's replica
// recommendation).
func (s *Source) Partitions(context.Context) (int, error) { return len(s.cfg.Streams), nil }

// LagCollector reports the group's lag and pending entries per stream,
// read at scrape time.
type LagCollector struct {
	src     *Source
	timeout time.Duration
}

// NewLagCollector returns a collector for src; register it on serve's
// registry. A scrape asks Redis, bounded by 5s; on failure it reports
// nothing rather than a stale value.
func NewLagCollector(src *Source) *LagCollector {
	return &LagCollector{src: src, timeout: 5 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- pendingDesc
}

// Collect implements prometheus.Collector.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	gl, err := c.src.GroupLag(ctx)
	if err != nil {
		return
	}
	for name, l := range gl {
		if l.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(l.Lag), name)
		}
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(l.Pending), name)
	}
}
