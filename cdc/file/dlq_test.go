package file_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
)

// TestFileDeadLettersListReplayPurge: the file source's dead letters can be
// listed with their reasons, replayed to the source file without the reason
// headers (once), and purged.
func TestFileDeadLettersListReplayPurge(t *testing.T) {
	dir := t.TempDir()
	dlqPath, srcPath := filepath.Join(dir, "events.jsonl.dlq.jsonl"), filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.WriteFile(srcPath, []byte(`{"not":"debezium"}`+"\n"), 0o644))

	dl := file.NewDeadLetters(dlqPath, "test")
	stamped := time.UnixMilli(1700000000000)
	msgs := []cdc.Record{
		// A bare line of a file: no topic, no timestamp.
		{Raw: cdc.Raw{Offset: 3, Value: []byte(`{"bad":`)}},
		{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Offset: 7, Key: []byte(`{"id":7}`), Value: []byte(`{"op":"x"}`), Timestamp: stamped, Headers: []cdc.Header{{Key: "traceparent", Value: []byte("00-abc-def-01")}}}},
	}
	before := time.Now().Add(-time.Second)
	require.NoError(t, dl.Put(t.Context(), msgs[0], &cdc.DecodeError{Coord: cdc.Coord{Offset: 3}, Reason: "invalid JSON"}))
	require.NoError(t, dl.Put(t.Context(), msgs[1], errors.New("unsupported op")))

	store := file.NewDeadLetterFile(dlqPath, srcPath)
	got, err := store.List(t.Context(), 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, int64(1), got[0].Offset, "the offset of a file dead letter is its line")
	require.Equal(t, int64(3), got[0].OrigOffset)
	require.Equal(t, "ragsync.cdc.DecodeError", got[0].ErrorClass)
	require.Contains(t, got[0].ErrorMessage, "invalid JSON")
	require.True(t, got[0].Timestamp.After(before), "a message without timestamp is stamped when dead-lettered, not year 1: %s", got[0].Timestamp)
	require.True(t, got[1].Timestamp.Equal(stamped), "a message's own timestamp is kept: %s", got[1].Timestamp)
	require.Equal(t, "dbserver1.public.articles", got[1].OrigTopic)
	require.Equal(t, "ragsync.pipeline.ApplyError", got[1].ErrorClass)

	one, err := store.List(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, one, 1)

	n, err := store.Replay(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	raw, err := os.ReadFile(srcPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 3, "the replayed dead letters follow the source's own line")
	require.NotContains(t, string(raw), "__connect.errors", "replay strips the reason headers")
	replayed := file.ParseLine([]byte(lines[2]), 3)
	require.Equal(t, msgs[1].Value, replayed.Value)
	require.Equal(t, msgs[1].Key, replayed.Key)
	require.Equal(t, msgs[1].Topic, replayed.Topic)
	require.True(t, replayed.Timestamp.Equal(stamped))
	require.Equal(t, []cdc.Header{{Key: "traceparent", Value: []byte("00-abc-def-01")}}, replayed.Headers)
	require.Equal(t, `{"bad":`, string(file.ParseLine([]byte(lines[1]), 2).Value), "a bare line replays as the same bytes")

	n, err = store.Replay(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "a second replay adds nothing")

	require.NoError(t, dl.Put(t.Context(), msgs[0], errors.New("again")))
	purged, err := store.Purge(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	got, err = store.List(t.Context(), 0)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestFileDeadLettersMissingOrUnwritable(t *testing.T) {
	dir := t.TempDir()
	none := file.NewDeadLetterFile(filepath.Join(dir, "none.dlq.jsonl"), "")
	got, err := none.List(t.Context(), 0)
	require.NoError(t, err, "no file: no dead letters")
	require.Empty(t, got)
	n, err := none.Purge(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)

	dlqPath := filepath.Join(dir, "x.dlq.jsonl")
	require.NoError(t, file.NewDeadLetters(dlqPath, "test").Put(t.Context(), cdc.Record{Raw: cdc.Raw{Offset: 1, Value: []byte("x")}}, errors.New("bad")))
	_, err = file.NewDeadLetterFile(dlqPath, filepath.Join(dir, "missing-dir", "events.jsonl")).Replay(t.Context())
	require.Error(t, err, "an unwritable source file fails the replay")
	got, err = file.NewDeadLetterFile(dlqPath, "").List(t.Context(), 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "a failed replay keeps the dead letters")
	_, err = file.NewDeadLetterFile(dlqPath, "").Replay(t.Context())
	require.ErrorContains(t, err, "no file to replay into")
	got, err = file.NewDeadLetterFile(dlqPath, "").List(t.Context(), 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "a replay with nowhere to go keeps the dead letters")
}
