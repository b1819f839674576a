package redisstream_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/internal/redistest"
)

// TestMain fails the run if any goroutine is still alive once every test has
// finished and cleaned up: a Redis client left open keeps its pool's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCloseEndsABlockedFetch: Close while Fetch waits in a long read
// (XREADGROUP BLOCK) makes that Fetch return io.EOF, and leaves no
// goroutine behind.
func TestCloseEndsABlockedFetch(t *testing.T) {
	b := setup(t)
	b.addArticles(t, 1) // the stream exists, so the read blocks on it
	before := goleak.IgnoreCurrent()
	consumer := "blocked-" + b.stream[5:13]
	s := b.source(t, redisstream.Config{Block: time.Minute, Consumer: consumer})
	fetch(t, s, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.Fetch(context.Background())
		done <- err
	}()
	// Wait until the read is blocked in Redis (CLIENT LIST names the
	// source's connection after its consumer).
	require.Eventually(t, func() bool {
		list, err := b.rdb.ClientList(t.Context()).Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, "name=ragsync:"+consumer+" ") && strings.Contains(line, "cmd=xreadgroup") && blocked(line) {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		require.True(t, errors.Is(err, io.EOF), "got %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Fetch still blocked after Close")
	}
	goleak.VerifyNone(t, before)
}

// TestFailedStartLeavesNoGoroutines: a start that fails after connecting
// (a configured key is not a stream) closes the client it made.
func TestFailedStartLeavesNoGoroutines(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.rdb.Set(t.Context(), b.stream, "x", 0).Err())
	before := goleak.IgnoreCurrent()
	_, err := redisstream.NewSource(t.Context(), redisstream.Config{URL: redistest.URL(), Streams: []string{b.stream}})
	require.ErrorContains(t, err, "source.redis_streams.streams")
	require.ErrorContains(t, err, "not a stream")
	goleak.VerifyNone(t, before)
}

// blocked reports whether a CLIENT LIST line is of a client blocked in a
// command (flag b).
func blocked(line string) bool {
	for f := range strings.FieldsSeq(line) {
		if flags, ok := strings.CutPrefix(f, "flags="); ok {
			return strings.Contains(flags, "b")
		}
	}
	return false
}
