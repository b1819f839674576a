package logdedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config tunes a Handler.
type Config struct {
	// Window is how long after a record is written its repeats are held
	// back and counted instead. Defaults to 10s.
	Window time.Duration
	// MinLevel is the lowest level collapsed; records below it pass
	// through untouched (info lines are start/stop summaries, rarely
	// floods). Defaults to slog.LevelWarn.
	MinLevel slog.Level
	// Volatile names attributes that vary between otherwise identical
	// records (a retry's attempt number, a message's offset) and so do not
	// make a record different. Defaults to DefaultVolatile.
	Volatile []string
}

// DefaultVolatile are the attributes ragsync's warnings carry that differ
// from one repeat of the same problem to the next.
var DefaultVolatile = []string{"attempt", "offset", "partition", "lsn", "doc_id", "duration", "elapsed", "applied_so_far"}

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = 10 * time.Second
	}
	if c.MinLevel == 0 {
		c.MinLevel = slog.LevelWarn
	}
	if c.Volatile == nil {
		c.Volatile = DefaultVolatile
	}
	return c
}

// Handler writes the first of a run of identical records at once, holds the
// repeats that follow within Config.Window, and then writes the last of
// them once, with "repeated"=N and the message suffixed "(N more like this
// in 10s)". Identical means the same level, message, attributes (those
// added by WithAttrs/WithGroup included) except the volatile ones, and
// errors with the same cause (see cause) whatever wraps them. It is
// safe for concurrent use; handlers derived with WithAttrs and WithGroup
// share its state.
type Handler struct {
	next   slog.Handler
	st     *state
	prefix string // the attributes and groups of WithAttrs/WithGroup, rendered
}

type state struct {
	cfg     Config
	mu      sync.Mutex
	pending map[string]*run
}

// run is a record written and the repeats held back since.
type run struct {
	next    slog.Handler
	last    slog.Record
	held    int
	timer   *time.Timer
	started time.Time
}

// New wraps next.
func New(next slog.Handler, cfg Config) *Handler {
	return &Handler{next: next, st: &state{cfg: cfg.withDefaults(), pending: map[string]*run{}}}
}

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// WithAttrs returns a Handler over next.WithAttrs sharing h's state.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		writeAttr(&b, a, nil)
	}
	return &Handler{next: h.next.WithAttrs(attrs), st: h.st, prefix: b.String()}
}

// WithGroup returns a Handler over next.WithGroup sharing h's state.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st, prefix: h.prefix + "[" + name + "]"}
}

// Handle writes r, or counts it as a repeat of a record written less than
// Config.Window ago.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.st.cfg.MinLevel {
		return h.next.Handle(ctx, r)
	}
	key := h.key(r)
	h.st.mu.Lock()
	if p, ok := h.st.pending[key]; ok {
		p.held++
		p.last = r.Clone()
		h.st.mu.Unlock()
		return nil
	}
	p := &run{next: h.next, started: r.Time}
	h.st.pending[key] = p
	p.timer = time.AfterFunc(h.st.cfg.Window, func() { h.st.end(key, p) })
	h.st.mu.Unlock()
	return h.next.Handle(ctx, r)
}

// key renders what makes r different from other records.
func (h *Handler) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(r.Message)
	b.WriteByte(0)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, a, h.st.cfg.Volatile)
		return true
	})
	return b.String()
}

func writeAttr(b *strings.Builder, a slog.Attr, volatile []string) {
	if slices.Contains(volatile, a.Key) {
		return
	}
	v := a.Value.Resolve()
	if err, ok := v.Any().(error); ok && v.Kind() == slog.KindAny && err != nil {
		fmt.Fprintf(b, "%s~%s;", a.Key, cause(err))
		return
	}
	fmt.Fprintf(b, "%s=%v;", a.Key, v)
}

// cause is what makes two errors the same problem: a network failure to the
// same address (the first *net.OpError in the chain, which names the
// operation, the peer and the reason), or else the same innermost error.
// The wrapping around it names the document or batch that met the problem,
// which varies from one repeat to the next.
func cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return fmt.Sprintf("%T:%s", op, op.Error())
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			if m, ok := err.(interface{ Unwrap() []error }); ok && len(m.Unwrap()) > 0 {
				next = m.Unwrap()[0]
			}
		}
		if next == nil {
			return fmt.Sprintf("%T:%s", err, err.Error())
		}
		err = next
	}
}

// end closes p's window: the repeats it held, if any, are written as one
// record.
func (s *state) end(key string, p *run) {
	s.mu.Lock()
	if s.pending[key] != p {
		s.mu.Unlock()
		return
	}
	delete(s.pending, key)
	s.mu.Unlock()
	s.write(p)
}

func (s *state) write(p *run) {
	if p.held == 0 {
		return
	}
	over := p.last.Time.Sub(p.started).Round(time.Second)
	in := "under 1s"
	if over >= time.Second {
		in = over.String()
	}
	r := slog.NewRecord(p.last.Time, p.last.Level, fmt.Sprintf("%s (%d more like this in %s)", p.last.Message, p.held, in), p.last.PC)
	p.last.Attrs(func(a slog.Attr) bool { r.AddAttrs(a); return true })
	r.AddAttrs(slog.Int("repeated", p.held))
	_ = p.next.Handle(context.Background(), r)
}

// Flush writes every count still held back, at once. Call it before the
// process exits.
func (h *Handler) Flush() {
	h.st.mu.Lock()
	runs := make([]*run, 0, len(h.st.pending))
	for key, p := range h.st.pending {
		p.timer.Stop()
		delete(h.st.pending, key)
		runs = append(runs, p)
	}
	h.st.mu.Unlock()
	slices.SortFunc(runs, func(a, b *run) int { return a.started.Compare(b.started) })
	for _, p := range runs {
		h.st.write(p)
	}
}
