package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestStoppedEmbedderIsNotAHang: with embedder.base_url refusing
// connections, serve keeps retrying (by design) but says so periodically —
// what fails, the setting to check, what /readyz says — and /readyz fails
// once pipeline.stall_after has passed.
func TestStoppedEmbedderIsNotAHang(t *testing.T) {
	_, schema := pgtest.Schema(t)
	dir := t.TempDir()
	events := filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(eventLines(t, article("c", 1, 10, bodyA))), 0o644))
	listen := freeAddr(t)
	cfg := filepath.Join(dir, "ragsync.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`source:
  kind: file
  file:
    path: %s
embedder:
  provider: openai
  base_url: http://%s/v1
  model: test-model
  dimensions: 64
  api_key: test
  timeout: 1s
  max_retries: 1
postgres:
  url: %s
  schema: %s
index: stall
pipeline:
  stall_after: 1s
  stall_log_interval: 200ms
http:
  listen: %s
`, events, freeAddr(t), pgtest.URL(), schema, listen)), 0o644))

	var logs lockedBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(&logs)
		cmd.SetArgs([]string{"serve", "--config", cfg})
		done <- cmd.ExecuteContext(ctx)
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusServiceUnavailable }, 60*time.Second, 100*time.Millisecond,
		"/readyz never failed; logs:\n%s", logs.String())
	_, body := readyz()
	require.Contains(t, body, "stalled")
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `"readyz":"failing`)
	}, 30*time.Second, 100*time.Millisecond, "no stall summary saying /readyz fails; logs:\n%s", logs.String())
	var summary string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "pipeline stalled") {
			summary = l
		}
	}
	require.Contains(t, summary, `"failing":"embedder"`)
	require.Contains(t, summary, `"check":"embedder.base_url`)
	require.Contains(t, summary, `"since":`)
	require.Contains(t, summary, "connection refused")
}
