package file_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name        string
		line        string
		wantTopic   string
		wantKey     string
		wantValue   string
		wantHeaders []cdc.Header
	}{
		{name: "bare value", line: `{"op":"c","after":{"id":1}}`, wantValue: `{"op":"c","after":{"id":1}}`},
		{name: "schema envelope stays a value", line: `{"schema":{},"payload":{"op":"c"}}`, wantValue: `{"schema":{},"payload":{"op":"c"}}`},
		{name: "key/value wrapper", line: `{"topic":"t","key":{"id":1},"value":{"op":"d"},"headers":{"b":"2","a":"1"}}`,
			wantTopic: "t", wantKey: `{"id":1}`, wantValue: `{"op":"d"}`,
			wantHeaders: []cdc.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}},
		{name: "wrapper tombstone", line: `{"key":{"id":1},"value":null}`, wantKey: `{"id":1}`},
		{name: "kcat -J", line: `{"topic":"t","partition":2,"offset":9,"key":"{\"id\":1}","payload":"{\"op\":\"u\"}","headers":["traceparent","00-x"]}`,
			wantTopic: "t", wantKey: `{"id":1}`, wantValue: `{"op":"u"}`,
			wantHeaders: []cdc.Header{{Key: "traceparent", Value: []byte("00-x")}}},
		{name: "a row with a value column is not a wrapper", line: `{"id":1,"value":"x","name":"y"}`, wantValue: `{"id":1,"value":"x","name":"y"}`},
		{name: "malformed line passes through for the decoder to reject", line: `{"op":`, wantValue: `{"op":`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := file.ParseLine([]byte(tc.line+"\n"), 7)
			require.EqualValues(t, 7, m.Offset)
			require.Equal(t, tc.wantTopic, m.Topic)
			require.Equal(t, tc.wantKey, string(m.Key))
			require.Equal(t, tc.wantValue, string(m.Value))
			require.Equal(t, tc.wantHeaders, m.Headers)
		})
	}
}

func TestFileSourceReadsEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	// Blank lines are skipped; a last line without a newline still counts.
	require.NoError(t, os.WriteFile(path, []byte("{\"op\":\"c\"}\n\n{\"op\":\"u\"}\n{\"op\":\"d\"}"), 0o644))
	src, err := file.NewSource(file.Config{Path: path, BatchSize: 2})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	var got []int64
	for {
		b, err := src.Fetch(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NoError(t, b.Ack(context.Background()))
		for _, m := range b.Records {
			got = append(got, m.Offset)
		}
	}
	require.Equal(t, []int64{1, 3, 4}, got, "offsets are line numbers")

	_, err = file.NewSource(file.Config{Path: filepath.Join(t.TempDir(), "missing.jsonl")})
	require.ErrorContains(t, err, "source.file.path")
}
