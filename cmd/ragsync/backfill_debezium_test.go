package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// signalWorld is a source schema with a table and a Debezium signal table,
// and an index schema, all dropped at cleanup.
func signalWorld(t *testing.T) (src, indexSchema string, conn *pgx.Conn) {
	t.Helper()
	_, indexSchema = pgtest.Schema(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	src = "sig_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+src+" CASCADE")
		conn.Close(context.Background())
	})
	_, err = conn.Exec(ctx, `CREATE SCHEMA `+src+`;
		CREATE TABLE `+src+`.articles (id int PRIMARY KEY, title text, body text);
		INSERT INTO `+src+`.articles SELECT g, 'Title '||g, 'Body of article '||g FROM generate_series(1, 5) g;
		CREATE TABLE `+src+`.debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`)
	require.NoError(t, err)
	return src, indexSchema, conn
}

func baseArgs(schema string) []string {
	return []string{"--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema, "--set", "http.listen=", "--set", "embedder.dimensions=16"}
}

// TestBackfillViaDebeziumSignalTable writes the execute-snapshot signal a
// connector reads from its signal table, then follows serve applying the
// incremental snapshot events the connector would produce for it.
func TestBackfillViaDebeziumSignalTable(t *testing.T) {
	src, schema, conn := signalWorld(t)
	ctx := context.Background()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runCLI(t, "", append([]string{"backfill", "--via", "debezium", "--signal-table", src + ".debezium_signal",
			"--table", src + ".articles", "--where", "id > 2", "--source-url", pgtest.URL(),
			"--follow-timeout", "30s", "--follow-interval", "50ms"}, baseArgs(schema)...)...)
		done <- result{out, err}
	}()

	var id, typ, data string
	require.Eventually(t, func() bool {
		return conn.QueryRow(ctx, "SELECT id, type, data FROM "+src+".debezium_signal").Scan(&id, &typ, &data) == nil
	}, 20*time.Second, 20*time.Millisecond, "no signal written")
	require.Equal(t, "execute-snapshot", typ)
	require.True(t, strings.HasPrefix(id, "ragsync-"))
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &got))
	require.Equal(t, map[string]any{
		"data-collections":      []any{src + ".articles"},
		"type":                  "incremental",
		"additional-conditions": []any{map[string]any{"data-collection": src + ".articles", "filter": "id > 2"}},
	}, got)

	// The connector's incremental snapshot events for the three rows, as
	// serve consumes them.
	var lines []string
	for i := 3; i <= 5; i++ {
		v := fmt.Sprintf(`{"op":"r","before":null,"after":{"id":%d,"title":"Title %d","body":"Body of article %d"},`+
			`"source":{"connector":"postgresql","name":"dbserver1","db":"test","schema":%q,"table":"articles","snapshot":"incremental","lsn":%d,"ts_ms":1700000000000},"ts_ms":1700000000000}`,
			i, i, i, src, 1000+i)
		lines = append(lines, fmt.Sprintf(`{"topic":"dbserver1.%s.articles","key":{"id":%d},"value":%s}`, src, i, v))
	}
	events := filepath.Join(t.TempDir(), "snapshot.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out, err := runCLI(t, "", append([]string{"serve", "--once", "--set", "source.kind=file", "--set", "source.file.path=" + events}, baseArgs(schema)...)...)
	require.NoError(t, err, out)

	select {
	case r := <-done:
		require.NoError(t, r.err, r.out)
		require.Contains(t, r.out, "sent execute-snapshot "+id)
		require.Contains(t, r.out, "snapshot applied: "+src+".articles 3/3")
	case <-time.After(30 * time.Second):
		t.Fatal("backfill --via debezium did not see the snapshot applied")
	}
}

func TestBackfillViaDebeziumKafkaStop(t *testing.T) {
	src, schema, _ := signalWorld(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "dbserver1.signals"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	out, err := runCLI(t, "", append([]string{"backfill", "--via", "debezium", "--signal-topic", "dbserver1.signals", "--stop",
		"--table", src + ".articles", "--set", "source.kafka.brokers=" + strings.Join(c.ListenAddrs(), ","),
		"--set", "source.kafka.topics=dbserver1." + src + ".articles"}, baseArgs(schema)...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "sent stop-snapshot")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("dbserver1.signals"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err())
	recs := fs.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "dbserver1", string(recs[0].Key), "the key is the connector's topic.prefix")
	var v map[string]any
	require.NoError(t, json.Unmarshal(recs[0].Value, &v))
	require.Equal(t, map[string]any{"type": "stop-snapshot", "data": map[string]any{"data-collections": []any{src + ".articles"}, "type": "incremental"}}, v)
}

func TestBackfillViaDebeziumErrors(t *testing.T) {
	src, schema, _ := signalWorld(t)
	table := []string{"--table", src + ".articles", "--source-url", pgtest.URL()}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no channel", []string{"--via", "debezium"}, "exactly one of --signal-table"},
		{"two channels", []string{"--via", "debezium", "--signal-table", src + ".debezium_signal", "--signal-topic", "x"}, "exactly one of --signal-table"},
		{"unknown via", []string{"--via", "kafka"}, `--via "kafka"`},
		{"missing signal table", []string{"--via", "debezium", "--signal-table", src + ".nope", "--follow=false"}, "signal.data.collection"},
		{"not applied in time", []string{"--via", "debezium", "--signal-table", src + ".debezium_signal", "--follow-timeout", "300ms", "--follow-interval", "50ms"}, "snapshot not complete after 300ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{"backfill"}, tc.args...), table...), baseArgs(schema)...)
			_, err := runCLI(t, "", args...)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
