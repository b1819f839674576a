package monitor

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// LogLine is a warning (or worse) log record carried in events.
type LogLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
	TraceID string    `json:"trace_id,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// LogRing is a slog.Handler that passes every record on and keeps the last
// warnings, so that an event can carry the log lines that bear on it. Wrap
// serve's handler with NewLogRing and give the ring to the monitor.
type LogRing struct {
	next  slog.Handler
	attrs []slog.Attr
	buf   *ring
}

type ring struct {
	mu    sync.Mutex
	lines []LogLine
	max   int
}

// NewLogRing wraps next, keeping the last max warnings.
func NewLogRing(next slog.Handler, max int) *LogRing {
	return &LogRing{next: next, buf: &ring{max: max}}
}

func (h *LogRing) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *LogRing) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l := LogLine{Time: r.Time, Level: r.Level.String(), Message: r.Message}
		visit := func(a slog.Attr) bool {
			switch a.Key {
			case "trace_id":
				l.TraceID = a.Value.String()
			case "error":
				l.Error = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			visit(a)
		}
		r.Attrs(visit)
		if l.TraceID == "" {
			l.TraceID = traceIDFromContext(ctx)
		}
		h.buf.mu.Lock()
		h.buf.lines = append(h.buf.lines, l)
		if len(h.buf.lines) > h.buf.max {
			h.buf.lines = h.buf.lines[len(h.buf.lines)-h.buf.max:]
		}
		h.buf.mu.Unlock()
	}
	return h.next.Handle(ctx, r)
}

func (h *LogRing) WithAttrs(as []slog.Attr) slog.Handler {
	return &LogRing{next: h.next.WithAttrs(as), attrs: append(slices.Clone(h.attrs), as...), buf: h.buf}
}

func (h *LogRing) WithGroup(name string) slog.Handler {
	return &LogRing{next: h.next.WithGroup(name), attrs: h.attrs, buf: h.buf}
}

// Recent returns the warnings of the last d (all kept ones when d is 0),
// oldest first.
func (h *LogRing) Recent(d time.Duration) []LogLine {
	if h == nil {
		return nil
	}
	h.buf.mu.Lock()
	defer h.buf.mu.Unlock()
	var out []LogLine
	for _, l := range h.buf.lines {
		if d == 0 || time.Since(l.Time) <= d {
			out = append(out, l)
		}
	}
	return out
}
