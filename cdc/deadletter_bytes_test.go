package cdc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
)

// A message that is not UTF-8 is a decode error, and its dead
// letter keeps the original bytes exactly, so a replay is byte-exact.

// notUTF8 is a Debezium PostgreSQL create whose text holds bytes no
// connector writes: 0xC3 0x28 (a broken two-byte sequence) and 0xFF.
var notUTF8 = []byte("{\"op\":\"c\",\"after\":{\"id\":1,\"title\":\"Ann\xc3\x28e \xff\"},\"source\":{\"connector\":\"postgresql\",\"schema\":\"public\",\"table\":\"articles\",\"lsn\":24023128,\"ts_ms\":1559033904863}}")

func decodeErrOf(t *testing.T, m cdc.Message) error {
	t.Helper()
	_, err := cdc.NewDecoder(cdc.DecoderConfig{}).Decode(m)
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de)
	return err
}

// TestFileDeadLetterRoundTripsBytes: non-UTF-8 key, value and header go to
// the dead-letter file and come back through the file source byte for byte,
// and fail to decode again the same way.
func TestFileDeadLetterRoundTripsBytes(t *testing.T) {
	t.Parallel()
	m := cdc.Message{Topic: "dbserver1.public.articles", Partition: 1, Offset: 42,
		Key: []byte("{\"id\":\"\xfe\"}"), Value: notUTF8, Timestamp: time.UnixMilli(1700000000000),
		Headers: []cdc.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}, {Key: "bin", Value: []byte{0, 0xff, 0x80}}}}
	cause := decodeErrOf(t, m)

	path := filepath.Join(t.TempDir(), "dead.jsonl")
	dl := cdc.NewFileDeadLetters(path, "test")
	require.NoError(t, dl.Put(t.Context(), m, cause))
	// A plain text dead letter keeps kcat's shape.
	text := cdc.Message{Topic: "t", Offset: 43, Key: []byte(`{"id":2}`), Value: []byte(`{"op":`)}
	require.NoError(t, dl.Put(t.Context(), text, decodeErrOf(t, text)))

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "\ufffd", "no replacement character in the file")

	src, err := cdc.NewFileSource(cdc.FileConfig{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	var got []cdc.Message
	for {
		b, err := src.Fetch(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, b.Messages...)
	}
	require.Len(t, got, 2)
	require.Equal(t, m.Topic, got[0].Topic)
	require.True(t, bytes.Equal(m.Value, got[0].Value), "value bytes")
	require.True(t, bytes.Equal(m.Key, got[0].Key), "key bytes")
	require.Equal(t, m.Headers, got[0].Headers[:2], "original headers first, bytes intact")
	var replayed *cdc.DecodeError
	_, err = cdc.NewDecoder(cdc.DecoderConfig{}).Decode(got[0])
	require.ErrorAs(t, err, &replayed)
	require.Equal(t, "value is not valid UTF-8 text", replayed.Reason)

	require.Equal(t, text.Value, got[1].Value)
	require.Equal(t, text.Key, got[1].Key)
	require.Contains(t, string(raw), `"payload":"{\"op\":"`, "text stays readable")
}

// TestFileSourceKeepsNonUTF8LineBytes: a line of the input file that is not
// UTF-8 reaches the decoder as it is (as a bare value), instead of being
// read as a wrapper with U+FFFD in its strings.
func TestFileSourceKeepsNonUTF8LineBytes(t *testing.T) {
	t.Parallel()
	line := []byte("{\"topic\":\"t\",\"key\":\"{}\",\"payload\":\"{\\\"x\\\":\\\"\xff\\\"}\"}")
	m := cdc.ParseLine(append(line, '\n'), 3)
	require.True(t, bytes.Equal(line, m.Value))
	_ = decodeErrOf(t, m)
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

	m := cdc.Message{Topic: topic, Offset: 7, Key: []byte("{\"id\":\"\xfe\"}"), Value: notUTF8,
		Headers: []cdc.Header{{Key: "bin", Value: []byte{0, 0xff}}}, Timestamp: time.UnixMilli(1700000000000)}
	require.NoError(t, cdc.NewKafkaDeadLetters(cl, "", "test").Put(t.Context(), m, decodeErrOf(t, m)))

	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic+cdc.DLQSuffix),
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
