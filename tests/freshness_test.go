package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// freshArticle is a change to public.articles committed now, as a
// {"key","value"} JSON Lines entry: its age in the backlog counts from now.
func freshArticle(id int, lsn int64, body string) string {
	now := time.Now().UnixMilli()
	source := map[string]any{"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": now,
		"snapshot": "false", "db": "app", "schema": "public", "table": "articles", "txId": 500 + lsn, "lsn": lsn}
	v, _ := json.Marshal(map[string]any{"op": "c", "source": source, "ts_ms": now, "before": nil,
		"after": map[string]any{"id": id, "title": "t", "body": body, "tenant": "a", "tags": []string{"t"}}})
	return fmt.Sprintf(`{"topic":"dbserver1.public.articles","key":{"id":%d},"value":%s}`, id, v)
}

// TestReadyzDegradesWhileTheProviderFails: serve follows a file with
// freshness.degraded_after 1s. While the embedding provider answers 503
// to one change, /readyz turns "degraded:", naming the backlog and the
// provider stage with the embedder's setting to check, and says so in the
// log once; once the provider answers, the change is applied, /readyz is
// ok again, the recovery is logged once, and the monitor's freshness
// signal (target 500ms) is exceeded by the late change.
func TestReadyzDegradesWhileTheProviderFails(t *testing.T) {
	t.Parallel() // own schema, files, port and provider
	e := newEnv(t, "")
	srv := openaitest.New(t, openaitest.Options{Dimensions: 64})
	var down atomic.Bool
	srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		if down.Load() && strings.Contains(strings.Join(r.Input, " "), "glacier") {
			return &openaitest.Fault{Status: http.StatusServiceUnavailable}
		}
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().String()
	require.NoError(t, ln.Close())
	events := e.dir + "/events.jsonl"
	writeLines(t, events, freshArticle(1, 100, "Harbours keep their lighthouses lit through the winter storms."))
	require.NoError(t, os.WriteFile(e.cfg, fmt.Appendf(nil, `source:
  kind: file
  file:
    path: %s
    follow: true
tables:
  - match: public.articles
    id: [id]
    text: "{{body}}"
embedder:
  provider: openai
  base_url: %s
  model: test-model
  dimensions: 64
  api_key: test
  max_retries: 1
postgres:
  url: %s
  schema: %s
index: articles
freshness:
  target: 500ms
  degraded_after: 1s
monitor:
  interval: 1s
  sample_size: -1
http:
  listen: %s
`, events, srv.URL, pgtest.URL(), e.schema, listen), 0o644))

	serve := ragsyncCmd("serve", "--config", e.cfg)
	logs := &syncBuffer{}
	serve.Stderr = logs
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		t.Logf("serve logs:\n%s", logs.String())
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 90*time.Second, 50*time.Millisecond, "serve never ready")
	// The first change was committed before serve started: on a loaded
	// machine it can itself be older than degraded_after when serve
	// fetches it, and degrade /readyz for a moment. Wait until it is
	// applied and /readyz is ok, then read the log only from there on.
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM %s.documents WHERE deleted_at IS NULL",
			pgx.Identifier{e.schema}.Sanitize())).Scan(&n)
		code, _ := readyz()
		return err == nil && n == 1 && code == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "the first change was never applied")
	time.Sleep(1100 * time.Millisecond) // one turn of the watch loop, which logs a recovery it notices
	seen := len(logs.String())
	since := func() string { return logs.String()[seen:] }

	down.Store(true)
	f, err := os.OpenFile(events, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(freshArticle(2, 200, "A glacier moves slowly down the valley, carving rock as it goes.") + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// Each attempt of the change begins with a read of the index (the sink
	// stage) before the provider fails it again, so a probe can land in
	// that read: wait for one that finds it at the provider, where it
	// spends its time while the provider fails.
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "degraded:") && strings.Contains(body, "held by the provider stage")
	}, 60*time.Second, 50*time.Millisecond, "/readyz never degraded naming the provider stage")
	require.Contains(t, body, "1 changes pending")
	require.Contains(t, body, "check embedder.base_url")
	require.Equal(t, http.StatusServiceUnavailable, func() int { c, _ := readyz(); return c }(), "still degraded while the provider fails")

	down.Store(false)
	require.Eventually(t, func() bool { code, b := readyz(); return code == http.StatusOK && b == "ok\n" }, 60*time.Second, 50*time.Millisecond,
		"/readyz never recovered")
	require.Eventually(t, func() bool { return strings.Count(since(), "no longer degraded") == 1 }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, strings.Count(since(), "readyz: degraded"), "logged once, not per probe")
	require.Eventually(t, func() bool {
		for l := range strings.SplitSeq(since(), "\n") {
			if strings.Contains(l, `"semantic_tag":"freshness"`) && strings.Contains(l, `"exceeded":true`) {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the late change exceeds the freshness target in a monitor event")
}
