package service

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/pipeline"
)

// TestReadyzDegradedByTheBacklog: /readyz answers 503 "degraded: …" while
// the oldest pending change is older than freshness.degraded_after, naming
// the backlog, the stage and what to check, and ok again once it is not;
// the log says so once each way, however often /readyz is asked. A
// stalled pipeline is reported first, as before.
func TestReadyzDegradedByTheBacklog(t *testing.T) {
	var mu sync.Mutex
	backlog := pipeline.Backlog{}
	set := func(b pipeline.Backlog) { mu.Lock(); backlog = b; mu.Unlock() }
	var logs bytes.Buffer
	gate := &freshnessGate{after: time.Minute, logger: slog.New(slog.NewTextHandler(&logs, nil)),
		backlog: func() pipeline.Backlog { mu.Lock(); defer mu.Unlock(); return backlog }}
	ready := true
	h := httpHandler(prometheus.NewRegistry(), func(context.Context) error { return nil }, func() bool { return ready }, gate.check, slog.New(slog.DiscardHandler))
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		b, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		return rec.Code, string(b)
	}

	set(pipeline.Backlog{Pending: 4, OldestAge: 59 * time.Second, Stage: pipeline.BacklogProvider, Check: "embedder.base_url"})
	code, body := readyz()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ok\n", body)

	set(pipeline.Backlog{Pending: 4, OldestAge: 90 * time.Second, Stage: pipeline.BacklogProvider, Check: "embedder.base_url"})
	for range 3 {
		code, body = readyz()
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "degraded: 4 changes pending, the oldest 1m30s old (over freshness.degraded_after 1m0s), held by the provider stage; check embedder.base_url\n", body)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "readyz: degraded"), logs.String())
	require.Contains(t, logs.String(), "held_by=provider")

	ready = false
	code, body = readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "stalled", "a stalled pipeline comes first")
	ready = true

	set(pipeline.Backlog{})
	for range 2 {
		code, body = readyz()
		require.Equal(t, http.StatusOK, code, body)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "no longer degraded"), logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), "readyz: degraded"), "not logged again")
}

// TestReadyzNeverDegradedWithoutBound: freshness.degraded_after 0 turns
// the check off, whatever the backlog.
func TestReadyzNeverDegradedWithoutBound(t *testing.T) {
	gate := &freshnessGate{logger: slog.New(slog.DiscardHandler),
		backlog: func() pipeline.Backlog {
			return pipeline.Backlog{Pending: 1, OldestAge: time.Hour, Stage: pipeline.BacklogSink}
		}}
	require.Empty(t, gate.check(t.Context()))
}
