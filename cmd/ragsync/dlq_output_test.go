package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/internal/redistest"
)

// dlqConfig writes a configuration whose source part is source and returns
// its path; dlq reads nothing else of it.
func dlqConfig(t *testing.T, source string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ragsync.yaml")
	require.NoError(t, os.WriteFile(path, []byte(source), 0o644))
	return path
}

// dlqLines runs `dlq args... --config cfg` and returns what it printed.
func dlqLines(t *testing.T, cfg string, args ...string) string {
	t.Helper()
	out, _, err := runCtx(t.Context(), append(append([]string{"dlq"}, args...), "--config", cfg)...)
	require.NoError(t, err)
	return out
}

// stamped is the dead letters' timestamp in these tests.
var stamped = time.UnixMilli(1700000000000)

// jsonLine decodes one line of dlq list --json, and its timestamp apart.
func jsonLine(t *testing.T, line string) (map[string]any, time.Time) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &m), line)
	ts, err := time.Parse(time.RFC3339Nano, m["timestamp"].(string))
	require.NoError(t, err)
	delete(m, "timestamp")
	return m, ts
}

// TestDLQOutputKafka pins what dlq prints for a Kafka source, topic by
// topic: list as text and as JSON, replay, purge, and an empty topic.
func TestDLQOutputKafka(t *testing.T) {
	const topic, quiet = "dbserver1.public.articles", "dbserver1.public.quiet"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, quiet, quiet+kafka.DLQSuffix))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	m := cdc.Record{Raw: cdc.Raw{Topic: topic, Offset: 7, Key: []byte(`{"id":7}`), Value: []byte(`{"bad":`), Timestamp: stamped}}
	cause := &cdc.DecodeError{Coord: cdc.Coord{Topic: topic, Offset: 7}, Reason: "invalid JSON"}
	require.NoError(t, kafka.NewDeadLetters(cl, "", "test").Put(t.Context(), m, cause))

	cfg := dlqConfig(t, fmt.Sprintf("source:\n  kind: kafka\n  kafka:\n    brokers: [%s]\n    topics: [%s, %s]\n",
		strings.Join(c.ListenAddrs(), ", "), topic, quiet))
	dlq, quietDLQ := topic+kafka.DLQSuffix, quiet+kafka.DLQSuffix

	require.Equal(t, fmt.Sprintf("%s/0@0  from %s/0@7  ragsync.cdc.DecodeError\n    %s\n%s: no dead letters\n", dlq, topic, cause.Error(), quietDLQ),
		dlqLines(t, cfg, "list"))
	out := dlqLines(t, cfg, "list", "--json")
	require.Equal(t, 1, strings.Count(out, "\n"), "an empty topic prints nothing as JSON: %s", out)
	got, ts := jsonLine(t, out)
	require.Equal(t, map[string]any{
		"topic": dlq, "partition": float64(0), "offset": float64(0),
		"original_topic": topic, "original_partition": float64(0), "original_offset": float64(7),
		"error_class": "ragsync.cdc.DecodeError", "error": cause.Error(), "key": `{"id":7}`, "value_bytes": float64(7),
	}, got)
	require.WithinDuration(t, time.Now(), ts, time.Hour, "a dead-letter record's own time, when it was produced")

	require.Equal(t, fmt.Sprintf("%s: replayed 1 record(s) to their original topics\n%s: replayed 0 record(s) to their original topics\n", dlq, quietDLQ),
		dlqLines(t, cfg, "replay"))
	require.Equal(t, fmt.Sprintf("%s: purged 1 record(s)\n%s: purged 0 record(s)\n", dlq, quietDLQ), dlqLines(t, cfg, "purge"))
	require.Equal(t, fmt.Sprintf("%s: no dead letters\n%s: no dead letters\n", dlq, quietDLQ), dlqLines(t, cfg, "list"))

	// dlq.topic names the one dead-letter topic instead.
	cfg = dlqConfig(t, fmt.Sprintf("source:\n  kind: kafka\n  kafka:\n    brokers: [%s]\n    topics: [%s]\ndlq:\n  topic: %s\n",
		strings.Join(c.ListenAddrs(), ", "), topic, quietDLQ))
	require.Equal(t, quietDLQ+": no dead letters\n", dlqLines(t, cfg, "list"))

	_, _, err = runCtx(t.Context(), "dlq", "list", "--config", dlqConfig(t, "source:\n  kind: kafka\n"))
	require.EqualError(t, err, "dlq: source.kafka.brokers is empty; the CDC dead letters live in Kafka (use --frontdoor for the query front door's)")
}

// TestDLQOutputFile pins what dlq prints for a file source.
func TestDLQOutputFile(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "events.jsonl")
	dlq := events + ".dlq.jsonl"
	cause := &cdc.DecodeError{Coord: cdc.Coord{Offset: 2}, Reason: "invalid JSON"}
	require.NoError(t, file.NewDeadLetters(dlq, "test").Put(t.Context(), cdc.Record{Raw: cdc.Raw{Offset: 2, Value: []byte("{not json"), Timestamp: stamped}}, cause))
	cfg := dlqConfig(t, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))

	require.Equal(t, fmt.Sprintf("%s:1  from (no topic) line 2  2023-11-14T22:13:20Z  ragsync.cdc.DecodeError\n    %s\n", dlq, cause.Error()),
		dlqLines(t, cfg, "list"))
	got, ts := jsonLine(t, dlqLines(t, cfg, "list", "--json"))
	require.Equal(t, map[string]any{
		"file": dlq, "line": float64(1),
		"original_topic": "", "original_partition": float64(0), "original_offset": float64(2),
		"error_class": "ragsync.cdc.DecodeError", "error": cause.Error(), "key": "", "value_bytes": float64(9),
	}, got)
	require.True(t, stamped.Equal(ts), "the message's timestamp: %v", ts)
	require.Equal(t, fmt.Sprintf("%s: replayed 1 record(s) to the end of %s\n", dlq, events), dlqLines(t, cfg, "replay"))
	require.Equal(t, dlq+": no dead letters\n", dlqLines(t, cfg, "list"))
	require.Empty(t, dlqLines(t, cfg, "list", "--json"))
	require.Equal(t, dlq+": purged 0 record(s)\n", dlqLines(t, cfg, "purge"))

	// Only dlq.path: list and purge work, replay has nowhere to go.
	cfg = dlqConfig(t, fmt.Sprintf("source:\n  kind: file\ndlq:\n  path: %s\n", dlq))
	require.Equal(t, dlq+": no dead letters\n", dlqLines(t, cfg, "list"))
	_, _, err := runCtx(t.Context(), "dlq", "replay", "--config", cfg)
	require.EqualError(t, err, "dlq replay: source.file.path is empty; set it to the file to replay into")
	_, _, err = runCtx(t.Context(), "dlq", "list", "--config", dlqConfig(t, "source:\n  kind: file\n"))
	require.EqualError(t, err, "dlq: source.file.path is empty; set it (or dlq.path) to find the file source's dead letters")
}

// TestDLQOutputPostgres pins what dlq prints for a Postgres source, whose
// replay queues the changes for serve's next start.
func TestDLQOutputPostgres(t *testing.T) {
	dlq := filepath.Join(t.TempDir(), "ragsync-s.dlq.jsonl")
	ch := &cdc.Change{Op: cdc.OpUpdate, Table: "public.articles", DocKey: "1", Key: map[string]any{"id": 1}}
	m := cdc.Record{Raw: cdc.Raw{Topic: "public.articles", Offset: 5, Timestamp: stamped}, Change: ch}
	require.NoError(t, file.NewDeadLetters(dlq, "test").Put(t.Context(), m, fmt.Errorf("embed: down")))
	cfg := dlqConfig(t, fmt.Sprintf("source:\n  kind: postgres\ndlq:\n  path: %s\n", dlq))

	require.Equal(t, fmt.Sprintf("%s:1  from public.articles line 5  2023-11-14T22:13:20Z  ragsync.pipeline.ApplyError\n    embed: down\n", dlq),
		dlqLines(t, cfg, "list"))
	require.Equal(t, fmt.Sprintf("%s: queued 1 change(s) in %s.replay; serve applies them when it next starts (restart it if it is running)\n", dlq, dlq),
		dlqLines(t, cfg, "replay"))
	require.Equal(t, dlq+": no dead letters\n", dlqLines(t, cfg, "list"))
	require.Equal(t, dlq+": purged 0 record(s)\n", dlqLines(t, cfg, "purge"))
}

// TestDLQOutputRedisStreams pins what dlq prints for a Redis Streams
// source: positions as entry ids, stream by stream.
func TestDLQOutputRedisStreams(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	stream, quiet := prefix+":dbserver1.public.articles", prefix+":dbserver1.public.quiet"
	const srcID = "1700000000000-3"
	off, _ := redisstream.Offset(srcID)
	m := cdc.Record{Raw: cdc.Raw{Topic: stream, Offset: off, Key: []byte(`{"id":7}`), Value: []byte(`{"bad":`), Timestamp: stamped}}
	cause := &cdc.DecodeError{Coord: cdc.Coord{Topic: stream, Offset: off}, Reason: "invalid JSON"}
	require.NoError(t, redisstream.NewDeadLetters(rdb, "test").Put(t.Context(), m, cause))
	ids, err := rdb.XRange(t.Context(), stream+redisstream.DLQSuffix, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, ids, 1)
	dlqID := ids[0].ID

	cfg := dlqConfig(t, fmt.Sprintf("source:\n  kind: redis-streams\n  redis_streams:\n    url: %s\n    streams: [%q, %q]\n",
		redistest.URL(), stream, quiet))
	dlq, quietDLQ := stream+redisstream.DLQSuffix, quiet+redisstream.DLQSuffix
	require.Equal(t, fmt.Sprintf("%s@%s  from %s@%s  ragsync.cdc.DecodeError\n    %s\n%s: no dead letters\n", dlq, dlqID, stream, srcID, cause.Error(), quietDLQ),
		dlqLines(t, cfg, "list"))
	got, ts := jsonLine(t, dlqLines(t, cfg, "list", "--json"))
	require.Equal(t, map[string]any{
		"stream": dlq, "entry_id": dlqID, "original_entry_id": srcID,
		"original_topic": stream, "original_partition": float64(0), "original_offset": float64(off),
		"error_class": "ragsync.cdc.DecodeError", "error": cause.Error(), "key": `{"id":7}`, "value_bytes": float64(7),
	}, got)
	require.WithinDuration(t, time.Now(), ts, time.Hour, "when it was dead-lettered: its entry's id")

	require.Equal(t, fmt.Sprintf("%s: replayed 1 record(s) to their original streams\n%s: replayed 0 record(s) to their original streams\n", dlq, quietDLQ),
		dlqLines(t, cfg, "replay"))
	back, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, back, 1)
	require.Equal(t, map[string]any{`{"id":7}`: `{"bad":`}, back[0].Values, "back in the sink's compact format")
	require.NoError(t, redisstream.NewDeadLetters(rdb, "test").Put(t.Context(), m, cause))
	require.Equal(t, fmt.Sprintf("%s: purged 1 record(s)\n%s: purged 0 record(s)\n", dlq, quietDLQ), dlqLines(t, cfg, "purge"))
	require.Equal(t, fmt.Sprintf("%s: no dead letters\n%s: no dead letters\n", dlq, quietDLQ), dlqLines(t, cfg, "list"))

	_, _, err = runCtx(t.Context(), "dlq", "list", "--config", dlqConfig(t, "source:\n  kind: redis-streams\n"))
	require.EqualError(t, err, "dlq: source.redis_streams.url is empty; the CDC dead letters live in that Redis (use --frontdoor for the query front door's)")
}
