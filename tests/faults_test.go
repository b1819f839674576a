package tests

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// editConfig replaces old with new in e's config file.
func editConfig(t *testing.T, e *env, old, new string) {
	t.Helper()
	b, err := os.ReadFile(e.cfg)
	require.NoError(t, err)
	require.Contains(t, string(b), old)
	require.NoError(t, os.WriteFile(e.cfg, []byte(strings.Replace(string(b), old, new, 1)), 0o644))
}

// TestFlakyProvider: the embeddings API fails 30% of calls with 429 +
// Retry-After, 500, timeouts and dropped connections; the run completes with
// the clean run's index.
func TestFlakyProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	events := faultHistory(21, 100, 500)
	want := cleanRunIndex(t, events)

	srv := openaitest.New(t, openaitest.Options{Dimensions: 256})
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(3, 3))
	var faults [4]atomic.Int64 // 429, 500, timeout, drop
	srv.SetHook(func(openaitest.Request) *openaitest.Fault {
		mu.Lock()
		x := r.IntN(100)
		mu.Unlock()
		switch {
		case x < 10:
			faults[0].Add(1)
			return &openaitest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "0", Header: http.Header{"Retry-After-Ms": {"50"}}}
		case x < 18:
			faults[1].Add(1)
			return &openaitest.Fault{Status: http.StatusInternalServerError}
		case x < 24:
			faults[2].Add(1)
			return &openaitest.Fault{Delay: 1500 * time.Millisecond} // over embedder.timeout
		case x < 30:
			faults[3].Add(1)
			return &openaitest.Fault{Drop: true}
		}
		return nil
	})
	w := newKafkaWorld(t, 3)
	w.produce(t, kafkaRecords(events))
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("flaky"))
	editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n", fmt.Sprintf(
		"embedder:\n  provider: openai\n  base_url: %s\n  model: text-embedding-3-small\n  dimensions: 256\n  api_key: sk-test\n  timeout: 1s\n  max_retries: 50\n", srv.URL))
	stats := e.serveOnce()
	injected := faults[0].Load() + faults[1].Load() + faults[2].Load() + faults[3].Load()
	t.Logf("flaky provider: %d events, %d requests, %d faults injected (429=%d 500=%d timeout=%d drop=%d), pipeline retries=%d, dead letters=%d",
		len(events), srv.Requests.Load(), injected, faults[0].Load(), faults[1].Load(), faults[2].Load(), faults[3].Load(), stats["retries"], stats["dead_lettered"])
	require.Zero(t, stats["dead_lettered"], "stats %v", stats)
	require.Positive(t, injected)
	require.GreaterOrEqual(t, float64(injected)/float64(srv.Requests.Load()), 0.2, "about 30%% of calls failed")
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}

// TestPostgresBackendsTerminated kills ragsync's Postgres connections over
// and over, from start-up (the migrations) to the end of the drain;
// transactions retry and the index equals the clean run's. Each round of
// terminations waits for ragsync to make progress since the previous one (a
// migration applied or records committed) before the next: the test asserts
// that ragsync recovers from every termination, whatever the machine's load,
// rather than that it outruns a fixed kill rate.
func TestPostgresBackendsTerminated(t *testing.T) {
	t.Parallel() // own schema, slot or kfake cluster, own application_name
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	events := faultHistory(31, 150, 1500)
	want := cleanRunIndex(t, events)

	w := newKafkaWorld(t, 3)
	w.produce(t, kafkaRecords(events))
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("pgkill"))
	var b [4]byte
	_, _ = crand.Read(b[:])
	app := "ragsync_e2e_" + hex.EncodeToString(b[:])
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	editConfig(t, e, "url: "+pgtest.URL(), "url: "+pgtest.URL()+sep+"application_name="+app)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	// progress is how far serve got: migrations applied, records left.
	progress := func() [2]int64 {
		var migrated int64
		_ = conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.goose_db_version WHERE version_id > 0", pgx.Identifier{e.schema}.Sanitize())).Scan(&migrated)
		return [2]int64{migrated, w.lagOf(t, "pgkill")}
	}
	p := e.startServe("serve")
	total := w.lagOf(t, "pgkill")
	terminated, rounds, duringMigrations := 0, 0, 0
	last := progress()
	for last[1] > 0 {
		require.False(t, p.exited(), "serve exited")
		var n int
		require.NoError(t, conn.QueryRow(ctx,
			`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
		if n > 0 {
			terminated += n
			rounds++
			if last[1] == total {
				duringMigrations++
			}
			// Wait for serve to recover and get further; the limit only
			// turns a hang into a failure.
			deadline := time.Now().Add(5 * time.Minute)
			for now := progress(); now == last; now = progress() {
				require.False(t, p.exited(), "serve exited after a termination")
				require.True(t, time.Now().Before(deadline), "no progress in 5 minutes after terminating %d backends (round %d)", n, rounds)
				time.Sleep(50 * time.Millisecond)
			}
		}
		last = progress()
		// A random pause, so terminations land anywhere in the work.
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	}
	stopServe(t, p)
	t.Logf("postgres faults: %d events, %d backends terminated over %d rounds (%d before the first commit), %d dead letters", total, terminated, rounds, duringMigrations, w.dlqCount(t))
	require.Positive(t, terminated, "no backend was terminated: is application_name applied?")
	require.Zero(t, w.dlqCount(t))
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}

// TestPoisonMessages interleaves undecodable records with good ones: each
// poison record lands in the dead-letter topic with its reason and
// coordinates, everything else is applied.
func TestPoisonMessages(t *testing.T) {
	t.Parallel() // own schema, slot or kfake cluster, own application_name
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	events := faultHistory(41, 60, 400)
	want := cleanRunIndex(t, events)

	source := `"source":{"version":"2.7.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1700000000000,"snapshot":"false","db":"app","schema":"public","table":"articles","txId":1,"lsn":1}`
	poison := []struct {
		name       string
		key, value []byte
	}{
		{"invalid JSON", []byte(`{"id":9001}`), []byte(`{"op":"c","after":{"id":9001,`)},
		{"missing key", nil, []byte(`{"op":"c","before":null,"after":{"title":"no id","body":"x"},` + source + `,"ts_ms":1}`)},
		{"wrong types", []byte(`{"id":9002}`), []byte(`{"op":"c","before":null,"after":42,` + source + `,"ts_ms":"yesterday"}`)},
		{"5 MB value", []byte(`{"id":9003}`), []byte(`{"op":"c","after":{"id":9003,"body":"` + strings.Repeat("x", 5<<20))},
	}
	recs := kafkaRecords(events)
	var mixed []*kgo.Record
	step := len(recs) / (len(poison) + 1)
	for i, r := range recs {
		if i > 0 && i%step == 0 && i/step <= len(poison) {
			p := poison[i/step-1]
			mixed = append(mixed, &kgo.Record{Key: p.key, Value: p.value, Headers: []kgo.RecordHeader{{Key: "case", Value: []byte(p.name)}}})
		}
		mixed = append(mixed, r)
	}
	w := newKafkaWorld(t, 1) // one partition: the poison sits between good records of the same log
	w.produce(t, mixed)
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("poison"))
	stats := e.serveOnce()
	require.Equal(t, len(poison), stats["dead_lettered"], "stats %v", stats)

	adm, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...))
	require.NoError(t, err)
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	letters, err := kafka.NewDeadLetterTopic(adm, faultTopic+kafka.DLQSuffix, "").List(ctx, 0)
	require.NoError(t, err)
	require.Len(t, letters, len(poison))
	for i, d := range letters {
		var name string
		for _, h := range d.Headers {
			if h.Key == "case" {
				name = string(h.Value)
			}
		}
		require.Equal(t, poison[i].name, name, "dead letters keep order and original headers")
		require.Equal(t, poison[i].value, d.Value, "%s: original value kept", name)
		require.Equal(t, faultTopic, d.OrigTopic)
		require.GreaterOrEqual(t, d.OrigOffset, int64(0))
		require.NotEmpty(t, d.ErrorMessage, name)
		require.NotEmpty(t, d.ErrorClass, name)
		t.Logf("dead letter %q at offset %d: %s: %.120s", name, d.OrigOffset, d.ErrorClass, d.ErrorMessage)
	}
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}
