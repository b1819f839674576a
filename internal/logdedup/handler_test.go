package logdedup_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/internal/logdedup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// noTime drops the time attribute so lines compare byte for byte.
func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func TestHandlerCollapsesRepeats(t *testing.T) {
	var buf lockedBuffer
	h := logdedup.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}), logdedup.Config{Window: time.Hour})
	log := slog.New(h).With("stage", "pipeline")
	dead := errors.New("embed: dial tcp 127.0.0.1:9: connect: connection refused")
	for i := range 64 {
		log.Warn("retrying after failure", "step", "embed", "attempt", i+1, "error", dead)
	}
	log.Warn("retrying after failure", "step", "sink", "attempt", 1, "error", dead) // another step: a different warning
	log.Info("pipeline progress", "applied", 1)
	log.Info("pipeline progress", "applied", 1)                                              // below the level: untouched
	slog.New(h).Warn("retrying after failure", "step", "embed", "attempt", 1, "error", dead) // without stage=pipeline: different
	h.Flush()
	require.Equal(t, []string{
		`level=WARN msg="retrying after failure" stage=pipeline step=embed attempt=1 error="embed: dial tcp 127.0.0.1:9: connect: connection refused"`,
		`level=WARN msg="retrying after failure" stage=pipeline step=sink attempt=1 error="embed: dial tcp 127.0.0.1:9: connect: connection refused"`,
		`level=INFO msg="pipeline progress" stage=pipeline applied=1`,
		`level=INFO msg="pipeline progress" stage=pipeline applied=1`,
		`level=WARN msg="retrying after failure" step=embed attempt=1 error="embed: dial tcp 127.0.0.1:9: connect: connection refused"`,
		`level=WARN msg="retrying after failure (63 more like this in under 1s)" stage=pipeline step=embed attempt=64 error="embed: dial tcp 127.0.0.1:9: connect: connection refused" repeated=63`,
	}, buf.lines())
}

// TestHandlerErrorsWithOneCause: errors that wrap the same cause in
// different context (the document each retry was for) are one problem;
// another cause is another warning.
func TestHandlerErrorsWithOneCause(t *testing.T) {
	var buf lockedBuffer
	h := logdedup.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}), logdedup.Config{Window: time.Hour})
	log := slog.New(h)
	refused := func(port int) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, Err: syscall.ECONNREFUSED}
	}
	for id := range 5 {
		log.Warn("retrying after failure", "error", fmt.Errorf("embed doc/%d: batch 0..%d: %w", id, id, refused(1)))
	}
	log.Warn("retrying after failure", "error", fmt.Errorf("embed doc/9: %w", refused(2)))                      // another peer
	log.Warn("retrying after failure", "error", fmt.Errorf("apply doc/9: %w", errors.New("permission denied"))) // another cause
	h.Flush()
	lines := buf.lines()
	require.Len(t, lines, 4, "%q", lines)
	require.Contains(t, lines[0], "embed doc/0")
	require.Contains(t, lines[1], "127.0.0.1:2")
	require.Contains(t, lines[2], "permission denied")
	require.Contains(t, lines[3], "(4 more like this in under 1s)")
	require.Contains(t, lines[3], "embed doc/4", "the count line carries the last repeat")
}

func TestHandlerWritesCountWhenWindowEnds(t *testing.T) {
	var buf lockedBuffer
	h := logdedup.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}), logdedup.Config{Window: 50 * time.Millisecond})
	log := slog.New(h)
	for range 3 {
		log.Warn("redis unreachable", "error", "connection refused")
	}
	require.Eventually(t, func() bool { return len(buf.lines()) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, `level=WARN msg="redis unreachable (2 more like this in under 1s)" error="connection refused" repeated=2`, buf.lines()[1])
	// After the window a repeat is written again, as the start of a new run.
	log.Warn("redis unreachable", "error", "connection refused")
	require.Len(t, buf.lines(), 3)
	h.Flush()
	require.Len(t, buf.lines(), 3, "a run of one holds nothing back")
}
