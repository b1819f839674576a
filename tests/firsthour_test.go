package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRedisDownSaysItFirst: with Redis down, the first thing the user reads
// is ragsync's own message, with its fix, not a burst of go-redis's pool
// lines ("failed to dial after 5 attempts") before it.
func TestRedisDownSaysItFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events, article{op: "c", id: 1, lsn: 1, title: "T", body: "tide pools"}.line())
	// Port 1: nothing listens there.
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\nfrontdoor:\n  enabled: true\n  redis_url: redis://127.0.0.1:1/0\n", events))
	for _, args := range [][]string{
		{"query", "--via", "redis", "--timeout", "2s", "tide pools"},
		{"serve"}, // the front door starts with serve, not with --once
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := ragsyncCmdContext(ctx, append(args, "--config", e.cfg)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.Error(t, cmd.Run(), "%v with Redis down", args)
		out := stderr.String()
		require.NotContains(t, out, "connection pool", "%v: go-redis's own lines are debug lines:\n%s", args, out)
		require.NotContains(t, out, "redis: 20", "%v: nothing bypasses the logger:\n%s", args, out)
		require.Contains(t, out, "connect to Redis at 127.0.0.1:1", "%v", args)
		require.Contains(t, out, "is Redis running?", "%v", args)
		if args[0] == "query" {
			require.True(t, strings.HasPrefix(out, "Error: connect to Redis"), "query's first line is ragsync's message:\n%s", out)
		}
	}
}

// TestDeadEmbedderWarnsOnceWithACount: an embedding endpoint that refuses
// every connection makes every worker retry; the log shows the warning once
// and then one line with how many more there were, not one line per retry.
func TestDeadEmbedderWarnsOnceWithACount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	var lines []string
	for id := 1; id <= 20; id++ {
		lines = append(lines, article{op: "c", id: id, lsn: int64(id), title: fmt.Sprintf("Doc %d", id), body: "tide pools and sea stars " + fmt.Sprint(id)}.line())
	}
	writeLines(t, events, lines...)
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n",
		"embedder:\n  provider: openai\n  base_url: http://127.0.0.1:1/v1\n  model: text-embedding-3-small\n  dimensions: 256\n  api_key: sk-test\n  max_retries: 1\n")
	p := e.startServe("serve")
	logPath := filepath.Join(e.dir, "serve.log")
	read := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	// Wait until the retries began, then until the first retry line has
	// been followed by at least one more held back: the held count shows up
	// in the count line written at exit.
	require.Eventually(t, func() bool { return strings.Contains(read(), "retrying after failure") || p.exited() },
		2*time.Minute, 100*time.Millisecond, "the pipeline never retried:\n%s", read())
	require.False(t, p.exited(), "serve exited:\n%s", read())
	time.Sleep(3 * time.Second) // retries keep failing meanwhile
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop on SIGTERM")
	}
	out := read()
	var first, counted int
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "retrying after failure") {
			continue
		}
		if strings.Contains(l, "more like this") {
			counted++
			require.Contains(t, l, `"repeated":`)
		} else {
			first++
		}
	}
	t.Logf("retry warnings written: %d, count lines: %d", first, counted)
	require.Positive(t, counted, "the repeats are counted in one line:\n%s", out)
	require.LessOrEqual(t, first, 3, "one line per distinct warning, not one per retry:\n%s", out)
}
