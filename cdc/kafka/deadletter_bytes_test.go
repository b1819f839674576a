package kafka_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
)

// A message that is not UTF-8 is a decode error, and its dead
// letter keeps the original bytes exactly, so a replay is byte-exact.

// notUTF8 is a Debezium PostgreSQL create whose text holds bytes no
// connector writes: 0xC3 0x28 (a broken two-byte sequence) and 0xFF.
var notUTF8 = []byte("{\"op\":\"c\",\"after\":{\"id\":1,\"title\":\"Ann\xc3\x28e \xff\"},\"source\":{\"connector\":\"postgresql\",\"schema\":\"public\",\"table\":\"articles\",\"lsn\":24023128,\"ts_ms\":1559033904863}}")

func decodeErrOf(t *testing.T, m cdc.Record) error {
	t.Helper()
	_, err := cdc.NewDecoder(cdc.DecoderConfig{}).Decode(m)
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de)
	return err
}

// TestKafkaDeadLetterRoundTripsBytes: the Kafka dead-letter topic holds the
// original key, value and headers byte for byte.
func TestKafkaDeadLetterRoundTripsBytes(t *testing.T) {
	t.Parallel()
	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	m := cdc.Record{Raw: cdc.Raw{Topic: topic, Offset: 7, Key: []byte("{\"id\":\"\xfe\"}"), Value: notUTF8, Headers: []cdc.Header{{Key: "bin", Value: []byte{0, 0xff}}}, Timestamp: time.UnixMilli(1700000000000)}}
	require.NoError(t, kafka.NewDeadLetters(cl, "", "test").Put(t.Context(), m, decodeErrOf(t, m)))

	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic+kafka.DLQSuffix),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(rd.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 {
		fs := rd.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		recs = append(recs, fs.Records()...)
	}
	r := recs[0]
	require.True(t, bytes.Equal(m.Value, r.Value), "value bytes")
	require.True(t, bytes.Equal(m.Key, r.Key), "key bytes")
	require.Equal(t, "bin", r.Headers[0].Key)
	require.Equal(t, []byte{0, 0xff}, r.Headers[0].Value)
}
