package redisstream_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc/redisstream"
)

// TestLagAndPending: the group's lag is what was not yet delivered,
// pending what was delivered and not yet acknowledged; the monitor's lag
// is both, and the collector exports them per stream.
func TestLagAndPending(t *testing.T) {
	b := setup(t)
	b.addArticles(t, 5)
	s := b.source(t, redisstream.Config{MaxPollRecords: 2})
	reg := prometheus.NewRegistry()
	reg.MustRegister(redisstream.NewLagCollector(s))
	gl, err := s.GroupLag(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]redisstream.GroupLag{b.stream: {Lag: 5, Pending: 0}}, gl)

	bs := fetch(t, s, 2)
	gl, err = s.GroupLag(t.Context())
	require.NoError(t, err)
	require.Equal(t, redisstream.GroupLag{Lag: 3, Pending: 2}, gl[b.stream])
	lag, err := s.Lag(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]map[int32]int64{b.stream: {0: 5}}, lag, "lag counts what is not applied yet")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ragsync_redis_stream_pending_records Entries delivered to ragsync's consumer group and not yet acknowledged: read, and not yet applied.
# TYPE ragsync_redis_stream_pending_records gauge
ragsync_redis_stream_pending_records{stream="`+b.stream+`"} 2
`), "ragsync_redis_stream_pending_records"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ragsync_redis_stream_lag_records Entries of the stream not yet delivered to ragsync's consumer group (XINFO GROUPS lag; Redis 7 or later).
# TYPE ragsync_redis_stream_lag_records gauge
ragsync_redis_stream_lag_records{stream="`+b.stream+`"} 3
`), "ragsync_redis_stream_lag_records"))

	ackAll(t, bs)
	bs = fetch(t, s, 3)
	ackAll(t, bs)
	lag, err = s.Lag(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]map[int32]int64{b.stream: {0: 0}}, lag)
	n, err := s.Partitions(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestLagOfAMissingStream: a stream not written yet has no lag to report.
func TestLagOfAMissingStream(t *testing.T) {
	b := setup(t)
	s := b.source(t, redisstream.Config{})
	lag, err := s.Lag(t.Context())
	require.NoError(t, err)
	require.Empty(t, lag)
}
