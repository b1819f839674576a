package fallback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// Watermark is what the front door reads to answer a request with after:
// the index's marks, and a notification when they are written
// (sink.Store).
type Watermark interface {
	Watermarks(ctx context.Context) ([]sink.StoredMark, error)
	ListenMarks(ctx context.Context, changed func()) error
}

// DefaultAfterWait is how long a request with after waits for the
// watermark when it sends no after_timeout_ms.
const DefaultAfterWait = 5 * time.Second

// afterPoll is how often the watermark is read again without a
// notification (one was missed while the listening connection was down).
const afterPoll = time.Second

// SetWatermark gives the front door the watermark of the index it
// answers from, so it can answer requests with after; without one such a
// request is answered with status error. Call it before Run, and again
// with SetTarget when the alias moves (each physical index has its own
// watermark). Safe for concurrent use.
func (f *FrontDoor) SetWatermark(w Watermark) { f.marks.setSource(w) }

// markSnapshot is one reading of the watermark. seq orders readings: a
// later one was read after an earlier one ended, and marks never move
// back, so it passes whatever an earlier one passed.
type markSnapshot struct {
	seq     uint64
	marks   []cdc.Mark
	updated []time.Time
}

func (s *markSnapshot) passed(a *cdc.After) (bool, string) {
	return a.Passed(s.marks, s.updated)
}

// watcher keeps the latest reading of the watermark for every request of
// this process: one LISTEN connection and one read per notification (or
// per afterPoll), however many requests wait. A waiter holds no
// connection, only a channel closed at the next reading.
type watcher struct {
	src    atomic.Pointer[Watermark]
	kick   chan struct{} // a reading is wanted; capacity 1, so kicks coalesce
	logger *slog.Logger

	mu       sync.Mutex
	seq      uint64
	snap     *markSnapshot // nil until read
	err      error         // of the last reading, nil if it succeeded
	changed  chan struct{} // closed at the next reading
	relisten context.CancelFunc
}

func newWatcher() *watcher {
	return &watcher{kick: make(chan struct{}, 1), changed: make(chan struct{})}
}

func (w *watcher) setSource(src Watermark) {
	w.src.Store(&src)
	w.mu.Lock()
	// A reading of another index's marks says nothing about this one.
	w.seq++
	w.snap = nil
	if w.relisten != nil {
		w.relisten()
	}
	w.mu.Unlock()
	w.poke()
}

func (w *watcher) source() Watermark {
	if p := w.src.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// current returns the latest reading (nil before the first), the error of
// the last attempt, and a channel closed at the next reading.
func (w *watcher) current() (*markSnapshot, error, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap, w.err, w.changed
}

func (w *watcher) refresh(ctx context.Context) {
	src := w.source()
	if src == nil {
		return
	}
	w.mu.Lock()
	from := w.seq // a source swapped during the read makes it void
	w.mu.Unlock()
	stored, err := src.Watermarks(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seq != from {
		return
	}
	if err != nil {
		w.err = err
	} else {
		w.seq++
		s := &markSnapshot{seq: w.seq, marks: make([]cdc.Mark, len(stored)), updated: make([]time.Time, len(stored))}
		for i, m := range stored {
			s.marks[i], s.updated[i] = m.Mark, m.Updated
		}
		w.snap, w.err = s, nil
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// run reads the watermark at every notification and every afterPoll until
// ctx ends. It listens on one connection, opened again after a failure.
func (w *watcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			src := w.source()
			if src == nil {
				return
			}
			lctx, lcancel := context.WithCancel(ctx)
			w.mu.Lock()
			w.relisten = lcancel
			w.mu.Unlock()
			err := src.ListenMarks(lctx, w.poke)
			lcancel()
			if ctx.Err() != nil {
				return
			}
			if lctx.Err() != nil {
				continue // the source was swapped: listen to the new one
			}
			w.logger.WarnContext(ctx, "listen for watermark writes failed; reading it every second meanwhile", "error", err, "backoff", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	})
	t := time.NewTicker(afterPoll)
	defer t.Stop()
	for {
		w.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.C:
		}
	}
}

// errStopping ends a wait when the front door stops: the request is left
// pending for another front door.
var errStopping = errors.New("front door stopping")

// wait returns the reading that passes a, or a *sink.NotYetError once
// timeout has passed (0: the latest reading only, without waiting).
func (w *watcher) wait(ctx context.Context, stop <-chan struct{}, a *cdc.After, timeout time.Duration) (*markSnapshot, error) {
	start := time.Now()
	timer := time.NewTimer(max(timeout, 0))
	defer timer.Stop()
	expired, poked := timeout <= 0, false
	for {
		snap, rerr, changed := w.current()
		why := "the watermark has not been read yet"
		if snap != nil {
			ok, reason := snap.passed(a)
			if ok {
				return snap, nil
			}
			why = reason
		}
		if rerr != nil {
			why = "the watermark could not be read: " + rerr.Error()
		}
		if expired {
			return nil, &sink.NotYetError{After: a.Text, Waited: time.Since(start), Why: why}
		}
		if !poked {
			// The reading may be up to afterPoll old if a notification was
			// missed: ask for a new one.
			w.poke()
			poked = true
		}
		select {
		case <-changed:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop:
			return nil, errStopping
		}
	}
}

// afterWait is how long r may wait for the watermark: what it asked, at
// most max_after_wait, never past its deadline.
func (f *FrontDoor) afterWait(r request, now time.Time) time.Duration {
	d := min(r.AfterWait, f.cfg.MaxAfterWait)
	if !r.Deadline.IsZero() {
		d = min(d, r.Deadline.Sub(now))
	}
	return max(d, 0)
}

// serveAfter answers a request with after: once the watermark passes it,
// from a cache entry computed after it passed or from a search of its
// own; or "not_yet" when it does not pass in time. A request that has to
// wait gives its in-flight slot back and waits in a goroutine of its own
// (at most max_after_waiters of them), holding no connection, and takes a
// slot again to answer.
func (f *FrontDoor) serveAfter(ctx context.Context, l lookup, deliveries int64, start time.Time) {
	stream := f.keys.requests()
	r := l.r
	if f.marks.source() == nil {
		f.finish(ctx, stream, r, reply{Status: StatusError, Source: SourceNone,
			Reason: "after: this front door has no watermark to wait on (serve runs it with the index's); send the request without after"}, outcomeError, start)
		return
	}
	if snap, _, _ := f.marks.current(); snap != nil {
		if ok, _ := snap.passed(r.After); ok {
			f.metrics.afterWaits.WithLabelValues(afterPassed).Inc()
			f.metrics.afterWait.WithLabelValues(afterPassed).Observe(0)
			f.answerAfter(ctx, l, deliveries, start)
			return
		}
	}
	select {
	case f.afterSlots <- struct{}{}:
	default:
		f.metrics.afterWaits.WithLabelValues(afterBusy).Inc()
		rep := reply{Status: StatusNotYet, Source: SourceNone,
			Reason: fmt.Sprintf("not yet: %d requests already wait for the watermark (max_after_waiters); the index has not reached %s", f.cfg.MaxAfterWaiters, r.After.Text)}
		f.finish(ctx, stream, r, rep, outcomeNotYet, start)
		return
	}
	f.afterWG.Go(func() {
		defer func() { <-f.afterSlots }()
		f.waitAfter(ctx, l, deliveries, start)
	})
}

// waitAfter waits for the watermark, keeping the entry claimed (an entry
// idle for min_idle would be reclaimed and waited for twice), then
// answers.
func (f *FrontDoor) waitAfter(ctx context.Context, l lookup, deliveries int64, start time.Time) {
	stream := f.keys.requests()
	r := l.r
	total := f.afterWait(r, start)
	deadline := start.Add(total)
	stop := make(<-chan struct{})
	if p := f.stopping.Load(); p != nil {
		stop = *p
	}
	for {
		step := min(time.Until(deadline), f.cfg.MinIdle/2)
		_, err := f.marks.wait(ctx, stop, r.After, step)
		var notYet *sink.NotYetError
		switch {
		case err == nil:
			waited := time.Since(start)
			// Many waiters pass at once when the watermark moves: their
			// searches take in-flight slots like any other, so they queue
			// here rather than on the database's pool (where they would
			// time out and open the breaker for everyone).
			select {
			case f.inFlight <- struct{}{}:
			case <-stop:
				f.metrics.afterWaits.WithLabelValues(afterStopped).Inc()
				return
			}
			defer func() { <-f.inFlight }()
			f.metrics.afterWaits.WithLabelValues(afterPassed).Inc()
			f.metrics.afterWait.WithLabelValues(afterPassed).Observe(waited.Seconds())
			f.answerAfter(ctx, l, deliveries, start)
			return
		case errors.As(err, &notYet) && time.Until(deadline) > 0:
			// Reset the entry's idle time; JUSTID leaves its delivery
			// count alone.
			if err := f.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: f.cfg.Group,
				Consumer: f.cfg.Consumer + "-after", Messages: []string{r.EntryID}}).Err(); err != nil {
				f.logger.WarnContext(ctx, "keep a waiting request claimed", "id", r.ID, "error", err)
			}
			continue
		case errors.As(err, &notYet):
			notYet.Waited = time.Since(start)
			f.metrics.afterWaits.WithLabelValues(afterNotYet).Inc()
			f.metrics.afterWait.WithLabelValues(afterNotYet).Observe(notYet.Waited.Seconds())
			f.finish(ctx, stream, r, reply{Status: StatusNotYet, Source: SourceNone, Reason: notYet.Error()}, outcomeNotYet, start)
			return
		default:
			// Stopping: left pending, another front door answers it.
			f.metrics.afterWaits.WithLabelValues(afterStopped).Inc()
			return
		}
	}
}

// answerAfter answers a request whose after the watermark has passed: from
// the result cache only if the entry was computed after a reading that
// passes it too, else by a search that starts now.
func (f *FrontDoor) answerAfter(ctx context.Context, l lookup, deliveries int64, start time.Time) {
	stream := f.keys.requests()
	r := l.r
	gen, err := f.rdb.Get(ctx, f.keys.generation()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.retryLater(ctx, r, deliveries, fmt.Errorf("read cache generation: %w", err))
		return
	}
	l.ck = requestKeys(l.t.index, gen, r)
	pipe := f.rdb.Pipeline()
	cached := pipe.Get(ctx, f.keys.cache(l.ck.fresh))
	marks := pipe.Get(ctx, f.keys.cacheMarks(l.ck.fresh))
	// The Bloom filters are read now, not with the batch: a document
	// written while the request waited is in them only since.
	l.checks = nil
	if r.Tenant != "" {
		l.checks = append(l.checks, f.bloom.queueCheck(ctx, pipe, KindTenant, r.Tenant))
	}
	if r.DocID != "" {
		l.checks = append(l.checks, f.bloom.queueCheck(ctx, pipe, KindDoc, r.DocID))
	}
	_, _ = pipe.Exec(ctx)
	if v, err := cached.Bytes(); err == nil {
		if s, err := marks.Bytes(); err == nil && snapshotPasses(s, r.After) {
			outcome := outcomeHit
			if bytes.Equal(v, emptyResults) {
				outcome = outcomeNegativeHit
			}
			f.finish(ctx, stream, r, reply{Status: StatusOK, Results: v, Cached: true, Source: SourceCache}, outcome, start)
			return
		}
	}
	f.answerMiss(ctx, l, deliveries, start, f.searchAfter)
}

// searchAfter searches for a request whose after a reading of the
// watermark passed. Identical requests share one search only if it started
// after a reading at least as late as the one current when they joined,
// which passed their after too.
func (f *FrontDoor) searchAfter(ctx context.Context, t *target, r request, ck cacheKeys) ([]byte, string, error) {
	snap, _, _ := f.marks.current()
	var seq uint64
	if snap != nil {
		seq = snap.seq
	}
	v, err, shared := f.sf.Do("after\x00"+ck.fresh+"\x00"+strconv.FormatUint(seq, 10), func() (any, error) {
		snap, _, _ := f.marks.current()
		results, err := f.searchVector(ctx, t, r)
		if err != nil {
			return nil, err
		}
		f.storeResult(ctx, r, ck, results, snap, nil)
		return results, nil
	})
	if err != nil {
		return nil, "", err
	}
	if shared {
		return v.([]byte), SourceShared, nil
	}
	return v.([]byte), SourceSearch, nil
}

// snapshotJSON is a reading of the watermark as stored beside a cache
// entry: the reading taken before the entry's search began.
type snapshotJSON struct {
	Marks   []cdc.Mark  `json:"marks"`
	Updated []time.Time `json:"updated"`
}

func encodeSnapshotOf(s *markSnapshot) []byte {
	if s == nil {
		return nil
	}
	b, err := json.Marshal(snapshotJSON{Marks: s.marks, Updated: s.updated})
	if err != nil {
		return nil
	}
	return b
}

// snapshotPasses reports whether a stored reading passes a; an unreadable
// one passes nothing.
func snapshotPasses(b []byte, a *cdc.After) bool {
	var s snapshotJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return false
	}
	ok, _ := a.Passed(s.Marks, s.Updated)
	return ok
}
