package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// gatedWord is in the text of the change a test writes last; the fake
// provider holds every request carrying it until the test opens the gate,
// so that "the change is written but not searchable yet" lasts exactly as
// long as the test wants.
const gatedWord = "zephyrquill"

// gatedProvider is a fake OpenAI-compatible provider answering in a few ms,
// except requests holding gatedWord, which wait for open (or 30 s).
type gatedProvider struct {
	srv  *openaitest.Server
	gate chan struct{}
	once sync.Once
}

func newGatedProvider(t *testing.T) *gatedProvider {
	t.Helper()
	p := &gatedProvider{srv: openaitest.New(t, openaitest.Options{Dimensions: 256}), gate: make(chan struct{})}
	p.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		for _, in := range r.Input {
			if strings.Contains(in, gatedWord) {
				select {
				case <-p.gate:
				case <-time.After(30 * time.Second):
				}
			}
		}
		return &openaitest.Fault{Delay: 3 * time.Millisecond}
	})
	t.Cleanup(p.open) // no request waits past the test
	return p
}

func (p *gatedProvider) open() { p.once.Do(func() { close(p.gate) }) }

// use points e's embedder at the provider.
func (p *gatedProvider) use(t *testing.T, e *env) {
	t.Helper()
	editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n", fmt.Sprintf(
		"embedder:\n  provider: openai\n  base_url: %s\n  model: text-embedding-3-small\n  dimensions: 256\n  api_key: sk-test\n  timeout: 40s\n", p.srv.URL))
}

// afterResult is what one `ragsync query --json` printed and how it exited.
type afterResult struct {
	hits   []string // doc ids
	notYet map[string]any
	stderr string
	code   int
}

// queryAfter runs `query --json` for text with extra flags (--after …).
func queryAfter(t *testing.T, e *env, text string, extra ...string) afterResult {
	t.Helper()
	args := append([]string{"query", "--json", "-k", "10", "--all-tenants", text, "--config", e.cfg}, extra...)
	cmd := ragsyncCmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := afterResult{stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "query output line %q", line)
		if m["status"] != nil {
			r.notYet = m
			continue
		}
		r.hits = append(r.hits, m["doc_id"].(string))
	}
	return r
}

// requireFound asserts that query --after pos finds doc.
func requireFound(t *testing.T, e *env, doc, pos string) {
	t.Helper()
	r := queryAfter(t, e, "harbour cranes and copper roofs", "--after", pos, "--after-timeout", "30s")
	require.Zero(t, r.code, "query --after %s: %s", pos, r.stderr)
	require.Contains(t, r.hits, doc, "query --after %s", pos)
}

// requireWaitsThenFinds asserts, for a change at pos whose embedding p
// holds, that a query without --after misses it (reading one's own write
// needs the wait), that query --after pos waits while the embedding is
// held, and that it finds the change once p answers.
func requireWaitsThenFinds(t *testing.T, e *env, p *gatedProvider, doc, pos string) {
	t.Helper()
	without := queryAfter(t, e, "harbour cranes and copper roofs")
	require.Zero(t, without.code, without.stderr)
	require.NotContains(t, without.hits, doc, "the provider holds the change's embedding: it cannot be searchable yet")
	require.NotEmpty(t, without.hits, "the seed is searchable")

	done := make(chan afterResult, 1)
	start := time.Now()
	go func() {
		done <- queryAfter(t, e, "harbour cranes and copper roofs", "--after", pos, "--after-timeout", "30s")
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("query --after %s returned while the change's embedding was held: exit %d, hits %v, %s", pos, res.code, res.hits, res.stderr)
	default:
	}
	p.open()
	var res afterResult
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("query --after %s did not end", pos)
	}
	require.Zero(t, res.code, res.stderr)
	require.Contains(t, res.hits, doc, "query --after %s", pos)
	t.Logf("query --after %s answered %s after it started (the embedding was held for 1.5s)", pos, time.Since(start).Round(time.Millisecond))
}

// requireNotYet asserts that query --after pos, a position the source will
// never reach, ends in "not yet" with exit 6 and no hits.
func requireNotYet(t *testing.T, e *env, pos string) {
	t.Helper()
	start := time.Now()
	r := queryAfter(t, e, "harbour cranes", "--after", pos, "--after-timeout", "700ms")
	require.Equal(t, 6, r.code, "query --after %s: %s", pos, r.stderr)
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "it waited --after-timeout")
	require.Contains(t, r.stderr, "not yet:")
	require.Empty(t, r.hits, "no hits when the index may not hold the change")
	require.NotNil(t, r.notYet, "--json prints the not_yet line")
	require.Equal(t, "not_yet", r.notYet["status"])
	require.Equal(t, pos, r.notYet["after"])
	require.NotEmpty(t, r.notYet["why"])
}

// waitWatermark waits until serve wrote a watermark for e's index (the
// index exists, so a query can open it); the mark may claim nothing yet.
func waitWatermark(t *testing.T, e *env) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+e.schema+".watermarks WHERE index_name = 'articles'").Scan(&n)
		return err == nil && n > 0
	}, 60*time.Second, 50*time.Millisecond, "serve wrote no watermark")
}

func seedArticle(id int, lsn int64) article {
	return article{op: "c", id: id, lsn: lsn, title: fmt.Sprintf("Seed %d", id), body: body("A seed paragraph about harbour cranes and the tides that move them.")}
}

func gatedArticle(id int, lsn int64) article {
	return article{op: "c", id: id, lsn: lsn, title: fmt.Sprintf("Written %d", id),
		body: body("The " + gatedWord + " paragraph is about copper roofs that turn green over forty years of rain.")}
}

// TestQueryAfterFileSource: a file followed by serve; the position of an
// appended change is its line. Each TestQueryAfter… test holds the
// change's embedding (requireWaitsThenFinds) and asks for a position the
// source never reaches (requireNotYet).
func TestQueryAfterFileSource(t *testing.T) {
	t.Parallel() // own schema, files and fake provider
	p := newGatedProvider(t)
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events, seedArticle(1, 100).line())
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n    follow: true\n", events))
	p.use(t, e)
	serve := e.startServe("serve")
	defer stopServe(t, serve)
	waitWatermark(t, e)
	requireFound(t, e, "public.articles/1", "1")

	f, err := os.OpenFile(events, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(gatedArticle(2, 101).line() + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	requireWaitsThenFinds(t, e, p, "public.articles/2", "2")
	requireNotYet(t, e, "1000000")
}

// TestQueryAfterKafkaSource: a kfake topic; the position of a change is its
// topic/partition/offset, or its commit time (Debezium's source.ts_ms).
func TestQueryAfterKafkaSource(t *testing.T) {
	t.Parallel() // own schema, kfake cluster and fake provider
	p := newGatedProvider(t)
	w := newKafkaWorld(t, 2)
	e := newEnv(t, w.source("after"))
	p.use(t, e)
	ctx := context.Background()
	seed := kafkaRecords([]article{seedArticle(1, 100)})[0]
	require.NoError(t, w.cl.ProduceSync(ctx, seed).FirstErr())
	serve := e.startServe("serve")
	defer stopServe(t, serve)
	waitWatermark(t, e)
	requireFound(t, e, "public.articles/1", fmt.Sprintf("%s/%d/%d", seed.Topic, seed.Partition, seed.Offset))

	rec := kafkaRecords([]article{gatedArticle(2, 101)})[0]
	require.NoError(t, w.cl.ProduceSync(ctx, rec).FirstErr())
	requireWaitsThenFinds(t, e, p, "public.articles/2", fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset))
	requireNotYet(t, e, fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset+1000))

	// By commit time: a change committed now, then its time.
	now := time.Now()
	a := gatedArticle(3, now.UnixMilli()-1700000000000)
	require.NoError(t, w.cl.ProduceSync(ctx, kafkaRecords([]article{a})...).FirstErr())
	requireFound(t, e, "public.articles/3", now.UTC().Format(time.RFC3339Nano))
	requireNotYet(t, e, now.Add(time.Hour).UTC().Format(time.RFC3339Nano))
}

// TestQueryAfterRedisStreamsSource: a Debezium Server stream; the position
// of a change is stream/<the entry id XADD returned>.
func TestQueryAfterRedisStreamsSource(t *testing.T) {
	t.Parallel() // own schema, Redis prefix and fake provider
	p := newGatedProvider(t)
	w := newRedisWorld(t, "articles")
	e := newEnv(t, w.source("after", ""))
	p.use(t, e)
	xadd := func(a article) string {
		id, err := w.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: w.stream, Values: []any{a.key(), a.value()}}).Result()
		require.NoError(t, err)
		return id
	}
	seed := xadd(seedArticle(1, 100))
	serve := e.startServe("serve")
	defer stopServe(t, serve)
	waitWatermark(t, e)
	requireFound(t, e, "public.articles/1", w.stream+"/"+seed)

	id := xadd(gatedArticle(2, 101))
	requireWaitsThenFinds(t, e, p, "public.articles/2", w.stream+"/"+id)
	requireNotYet(t, e, w.stream+"/99999999999999-0")
}

// TestQueryAfterPostgresSource: logical replication; the position of a
// change is pg_current_wal_lsn() read right after its COMMIT. While the
// provider holds the change's embedding, a query without --after misses
// it (read-your-writes needs the wait); query --after waits and finds it
// once the embedding is answered; the watermark view says the same in SQL.
func TestQueryAfterPostgresSource(t *testing.T) {
	t.Parallel() // own schema, slot, publication and fake provider
	p := newGatedProvider(t)
	r := pgtest.Replication(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (1, 'Seed', 'A seed paragraph about harbour cranes and the tides that move them.')`, r.Schema))
	ctx := context.Background()
	var seedLSN string
	require.NoError(t, r.Conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&seedLSN))
	e := pgSourceEnv(t, r, r.Slot)
	p.use(t, e)
	serve := e.startServe("serve")
	defer stopServe(t, serve)
	waitWatermark(t, e)
	requireFound(t, e, r.Schema+".articles/1", seedLSN)

	r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (2, 'Written', $1)`, r.Schema),
		"The "+gatedWord+" paragraph is about copper roofs that turn green over forty years of rain.")
	var lsn string
	require.NoError(t, r.Conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	doc := r.Schema + ".articles/2"

	passed := func() bool {
		var ok bool
		require.NoError(t, r.Conn.QueryRow(ctx, `SELECT coalesce(bool_or(position::pg_lsn >= $1::pg_lsn), false) FROM `+e.schema+`.watermark
WHERE index_name = 'articles' AND kind = 'lsn'`, lsn).Scan(&ok))
		return ok
	}
	require.False(t, passed(), "the watermark view does not claim the held change")
	requireWaitsThenFinds(t, e, p, doc, lsn)
	require.True(t, passed(), "the watermark view passes the LSN once the change is searchable")

	// An idle slot moves to the server's position: a later LSN passes
	// without any change of a published table.
	var idle string
	require.NoError(t, r.Conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&idle))
	requireFound(t, e, doc, idle)
	requireNotYet(t, e, "FFFFFFFF/FFFFFFFF")
}
