package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// Paragraphs on distinct subjects, so the offline embedder ranks them
// unambiguously.
var (
	kayak = []string{
		"Sea kayaking starts with a stable boat and a paddle sized to your height and the width of the hull.",
		"Practise the wet exit and the paddle float rescue in calm water before any open crossing with tidal current.",
		"Check the marine forecast for wind against tide, because steep short waves build quickly off headlands.",
	}
	espresso = []string{
		"Espresso extraction depends on grind size, dose and water temperature around ninety three degrees.",
		"A shot that runs too fast tastes sour and thin; grind finer until the flow slows to about thirty seconds.",
		"Steam milk for a flat white to a silky microfoam, keeping the wand tip just under the surface.",
	}
	glacier = []string{
		"Glaciers move as ice deforms under its own weight and slides on meltwater at the bed.",
		"Crevasses open where the glacier flows over a steep step in the bedrock and the ice is stretched.",
		"Moraines record the former extent of the ice as ridges of unsorted rock debris left in the valley.",
	}
)

func body(paras ...string) string { return strings.Join(paras, "\n\n") }

func TestFileSourceEndToEnd(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	updated := append([]string{}, espresso...)
	updated[2] = "Pour the espresso over a cold tonic water for a bright summer drink with a twist of orange peel."
	writeLines(t, events,
		article{op: "c", id: 1, lsn: 100, title: "Kayaking", body: body(kayak...), tenant: "acme"}.line(),
		article{op: "c", id: 2, lsn: 110, title: "Espresso", body: body(espresso...), tenant: "acme"}.line(),
		article{op: "c", id: 3, lsn: 120, title: "Glaciers", body: body(glacier...), tenant: "globex"}.line(),
		`{"this is": "not a debezium message"`, // poison: dead-lettered, nothing else lost
		article{op: "u", id: 2, lsn: 130, title: "Espresso", body: body(updated...), tenant: "acme"}.line(),
		article{op: "d", id: 3, lsn: 140}.line(),
		`{"topic":"dbserver1.public.articles","key":{"id":3},"value":null}`, // tombstone
	)
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))

	stats := e.serveOnce()
	require.Equal(t, 3, stats["op_c"], "stats %v", stats)
	require.Equal(t, 1, stats["op_u"], "stats %v", stats)
	require.Equal(t, 1, stats["op_d"], "stats %v", stats)
	require.Equal(t, 1, stats["skipped_tombstone"], "stats %v", stats)
	require.Equal(t, 1, stats["dead_lettered"], "stats %v", stats)
	require.Positive(t, stats["chunks_unchanged"], "the update kept unchanged chunks: %v", stats)

	dead, err := os.ReadFile(events + ".dlq.jsonl")
	require.NoError(t, err)
	require.Contains(t, string(dead), "not a debezium message")
	require.Contains(t, string(dead), "__connect.errors.exception.message")

	hits := e.query("espresso grind size dose and water temperature")
	require.NotEmpty(t, hits)
	require.Equal(t, "public.articles/2", hits[0].DocID)
	// The updated paragraph is searchable, the replaced one is gone.
	hits = e.query("espresso over cold tonic water with orange peel")
	require.Equal(t, "public.articles/2", hits[0].DocID)
	require.Contains(t, hits[0].Text, "tonic")
	for _, h := range e.query("glacier crevasses and moraines in the valley") {
		require.NotEqual(t, "public.articles/3", h.DocID, "deleted document returned")
	}
	// Tenant filter.
	for _, h := range e.query("kayak paddle", "--tenant", "globex") {
		require.NotEqual(t, "public.articles/1", h.DocID)
	}

	// Replaying the same file changes nothing: every change is a duplicate or stale.
	again := e.serveOnce()
	require.Zero(t, again["chunks_inserted"], "replay wrote chunks: %v", again)
	require.Zero(t, again["chunks_embedded"], "replay embedded: %v", again)
	require.Zero(t, again["applied"], "replay applied changes: %v", again)
}

func TestStaleChangeIsSkipped(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events,
		article{op: "c", id: 7, lsn: 500, title: "Glaciers", body: body(glacier...)}.line(),
		// An older version of the same document arrives late.
		article{op: "u", id: 7, lsn: 300, title: "Kayaking", body: body(kayak...)}.line(),
	)
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	stats := e.serveOnce()
	require.Equal(t, 1, stats["stale"], "stats %v", stats)
	hits := e.query("sea kayaking paddle float rescue")
	for _, h := range hits {
		require.NotContains(t, h.Text, "kayak", "stale content was applied")
	}
}

func TestDeleteDisappearsFromQuery(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events, article{op: "c", id: 9, lsn: 10, title: "Espresso", body: body(espresso...)}.line())
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	e.serveOnce()
	require.Equal(t, "public.articles/9", e.query("espresso grind size")[0].DocID)

	writeLines(t, events, article{op: "d", id: 9, lsn: 20}.line())
	e.serveOnce()
	require.Empty(t, e.query("espresso grind size"))

	// A late create older than the delete stays fenced out.
	writeLines(t, events, article{op: "c", id: 9, lsn: 15, title: "Espresso", body: body(espresso...)}.line())
	stats := e.serveOnce()
	require.Equal(t, 1, stats["stale"], "stats %v", stats)
	require.Empty(t, e.query("espresso grind size"))
}

func TestKafkaSourceEndToEnd(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	e := newEnv(t, "")
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: kafka\n  kafka:\n    brokers: [%s]\n    topics: [%s]\n    group: e2e\n",
		strings.Join(brokers, ","), topic))

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func(as ...article) {
		t.Helper()
		var recs []*kgo.Record
		for _, a := range as {
			recs = append(recs, &kgo.Record{Key: []byte(a.key()), Value: []byte(a.value())})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	}
	produce(
		article{op: "c", id: 1, lsn: 100, title: "Kayaking", body: body(kayak...)},
		article{op: "c", id: 2, lsn: 110, title: "Espresso", body: body(espresso...)},
	)
	produce(article{op: "c", id: 3, lsn: 120, title: "Glaciers", body: body(glacier...)})
	// A poison record on the topic goes to the dead-letter topic.
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(`{"id":4}`), Value: []byte("{oops")}).FirstErr())

	stats := e.serveOnce()
	require.Equal(t, 3, stats["op_c"], "stats %v", stats)
	require.Equal(t, 1, stats["dead_lettered"], "stats %v", stats)
	require.Equal(t, "public.articles/3", e.query("glacier moraines")[0].DocID)

	// Offsets were committed: a second run sees only what is new.
	produce(article{op: "d", id: 3, lsn: 130})
	stats = e.serveOnce()
	require.Equal(t, 0, stats["op_c"], "records were redelivered after commit: %v", stats)
	require.Equal(t, 1, stats["op_d"], "stats %v", stats)
	for _, h := range e.query("glacier moraines") {
		require.NotEqual(t, "public.articles/3", h.DocID)
	}

	// The dead letter carries the original value and the reason.
	dl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic+".ragsync-dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(dl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fs := dl.PollRecords(ctx, 10)
	require.NoError(t, fs.Err0())
	recs := fs.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "{oops", string(recs[0].Value))
	headers := map[string]string{}
	for _, h := range recs[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	require.Equal(t, topic, headers["__connect.errors.topic"])
	require.NotEmpty(t, headers["__connect.errors.exception.message"])

	// The CLI lists it, replays it to the source topic once (a second replay
	// finds nothing new), and purges it.
	out, _ := e.run(false, "dlq", "list")
	require.Contains(t, out, "not JSON")
	out, _ = e.run(false, "dlq", "replay")
	require.Contains(t, out, "replayed 1 record")
	out, _ = e.run(false, "dlq", "replay")
	require.Contains(t, out, "replayed 0 record")
	stats = e.serveOnce()
	require.Equal(t, 1, stats["dead_lettered"], "the replayed, still-broken record is dead-lettered again: %v", stats)
	out, _ = e.run(false, "dlq", "purge")
	require.Contains(t, out, "purged")
	out, _ = e.run(false, "dlq", "list")
	require.Contains(t, out, "no dead letters")
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "source:\n  kind: carrier-pigeon\n")
	out, err := e.run(true, "serve", "--once", "--set", "chunker.max_tokens=10", "--set", "embedder.dimensions=0")
	require.Error(t, err)
	require.Contains(t, out, "source.kind")
	require.Contains(t, out, "chunker.")
	require.Contains(t, out, "embedder.dimensions")
}

// writeConfigSource replaces the config's source section.
func writeConfigSource(t *testing.T, e *env, source string) {
	t.Helper()
	b, err := os.ReadFile(e.cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(e.cfg, []byte(source+string(b)), 0o644))
}

// TestServeWarnsWhenAutovacuumSkips: a table autovacuum skips fills with
// dead chunk rows, so serve says which and how to fix it, and carries on.
func TestServeWarnsWhenAutovacuumSkips(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events, article{op: "c", id: 1, lsn: 100, title: "Glaciers", body: body(glacier...)}.line())
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	e.run(false, "migrate")
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "ALTER TABLE "+e.schema+".chunks SET (autovacuum_enabled = false)")
	require.NoError(t, err)

	out, err := e.run(false, "serve", "--once")
	require.NoError(t, err)
	require.Contains(t, out, "autovacuum does not cover this table")
	require.Contains(t, out, "ALTER TABLE "+e.schema+".chunks RESET (autovacuum_enabled)")
	require.Contains(t, out, "op_c=1", "serve went on after the warning")
}

// startFrontDoorServe configures e to follow the file events with the front
// door on under a Redis prefix of the test's own ("tag" + random hex), with
// frontdoorExtra appended to the frontdoor: section (indented lines) and
// extra as top-level YAML, starts serve, and stops it (SIGTERM) when the
// test ends, logging its output. It returns the prefix and serve's stderr
// so far (safe to read while serve runs).
func startFrontDoorServe(t *testing.T, e *env, events, tag, frontdoorExtra, extra string) (string, *syncBuffer) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := tag + hex.EncodeToString(b[:])
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n    follow: true\n"+
		"frontdoor:\n  enabled: true\n  redis_url: %s\n  prefix: %s\n%s%s", events, redisURL(), prefix, frontdoorExtra, extra))
	serve := ragsyncCmd("serve", "--config", e.cfg)
	logs := &syncBuffer{}
	serve.Stderr = logs
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		t.Logf("serve logs:\n%s", logs.String())
	})
	return prefix, logs
}
