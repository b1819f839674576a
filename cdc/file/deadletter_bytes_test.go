package file_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
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

// TestFileDeadLetterRoundTripsBytes: non-UTF-8 key, value and header go to
// the dead-letter file and come back through the file source byte for byte,
// and fail to decode again the same way.
func TestFileDeadLetterRoundTripsBytes(t *testing.T) {
	t.Parallel()
	m := cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Partition: 1, Offset: 42, Key: []byte("{\"id\":\"\xfe\"}"), Value: notUTF8, Timestamp: time.UnixMilli(1700000000000), Headers: []cdc.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}, {Key: "bin", Value: []byte{0, 0xff, 0x80}}}}}
	cause := decodeErrOf(t, m)

	path := filepath.Join(t.TempDir(), "dead.jsonl")
	dl := file.NewDeadLetters(path, "test")
	require.NoError(t, dl.Put(t.Context(), m, cause))
	// A plain text dead letter keeps kcat's shape.
	text := cdc.Record{Raw: cdc.Raw{Topic: "t", Offset: 43, Key: []byte(`{"id":2}`), Value: []byte(`{"op":`)}}
	require.NoError(t, dl.Put(t.Context(), text, decodeErrOf(t, text)))

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "\ufffd", "no replacement character in the file")

	src, err := file.NewSource(file.Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	var got []cdc.Record
	for {
		b, err := src.Fetch(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, b.Records...)
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
	m := file.ParseLine(append(line, '\n'), 3)
	require.True(t, bytes.Equal(line, m.Value))
	_ = decodeErrOf(t, m)
}
