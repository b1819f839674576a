package sink

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
)

// WatermarkChannel is the channel a watermark's write notifies, with the
// schema and index as payload ("schema.index"), so a waiting reader wakes
// at once rather than polling.
const WatermarkChannel = "ragsync_watermark"

// StoredMark is a lane's watermark as the index holds it.
type StoredMark struct {
	cdc.Mark
	// Updated is when the mark was last written, on the database's clock;
	// Writer names the process (host and pid).
	Updated time.Time
	Writer  string
}

// writer names this process in the rows it writes.
var writer = func() string {
	h, _ := os.Hostname()
	return h + "/" + strconv.Itoa(os.Getpid())
}()

// SaveMarks records marks as the index's watermark in one transaction
// that notifies WatermarkChannel. A lane never moves back: a mark behind
// the stored one (a replica that has lost the partition since, a replay)
// changes nothing, and the time watermark only moves forward. The caller
// saves only what its source acknowledged, which the sink had committed
// before.
func (s *Store) SaveMarks(ctx context.Context, marks []cdc.Mark) error {
	if s.mode == Read {
		return ErrReadOnly
	}
	if len(marks) == 0 {
		return nil
	}
	t := pgx.Identifier{s.cfg.Schema, "watermarks"}.Sanitize()
	b := &pgx.Batch{}
	for _, m := range marks {
		if m.Ord == nil {
			return fmt.Errorf("watermark of %s lane %q has no order", m.Source, m.Lane)
		}
		b.Queue(`INSERT INTO `+t+` AS w (index_name, source, lane, kind, position, ord, committed_at, through_at, caught_up, writer, updated_at)
VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8, $9, $10, now())
ON CONFLICT (index_name, source, lane) DO UPDATE SET
  kind = EXCLUDED.kind, position = EXCLUDED.position, ord = EXCLUDED.ord,
  committed_at = GREATEST(w.committed_at, EXCLUDED.committed_at),
  through_at = GREATEST(w.through_at, EXCLUDED.through_at),
  caught_up = EXCLUDED.caught_up, writer = EXCLUDED.writer, updated_at = now()
WHERE w.ord <= EXCLUDED.ord`,
			s.cfg.Index, m.Source, m.Lane, m.Kind, m.Position, m.Ord.String(), nullTime(m.Commit), nullTime(m.Through), m.CaughtUp, writer)
	}
	b.Queue(`SELECT pg_notify($1, $2)`, WatermarkChannel, s.cfg.Schema+"."+s.cfg.Index)
	// A batch runs in one implicit transaction: the notification is sent
	// when the rows are committed, and not at all if they are not.
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("save the watermark of index %s: %w", s.cfg.Index, err)
	}
	return nil
}

// Watermarks returns the index's marks, by source and lane.
func (s *Store) Watermarks(ctx context.Context) ([]StoredMark, error) {
	rows, err := s.pool.Query(ctx, `SELECT source, lane, kind, position, ord::text, committed_at, through_at, caught_up, writer, updated_at
FROM `+pgx.Identifier{s.cfg.Schema, "watermarks"}.Sanitize()+` WHERE index_name = $1 ORDER BY source, lane`, s.cfg.Index)
	if err != nil {
		return nil, fmt.Errorf("read the watermark of index %s: %w (run `ragsync migrate` if the table is missing)", s.cfg.Index, err)
	}
	defer rows.Close()
	var out []StoredMark
	for rows.Next() {
		var m StoredMark
		var ord string
		var commit, through *time.Time
		if err := rows.Scan(&m.Source, &m.Lane, &m.Kind, &m.Position, &ord, &commit, &through, &m.CaughtUp, &m.Writer, &m.Updated); err != nil {
			return nil, err
		}
		o, ok := new(big.Int).SetString(ord, 10)
		if !ok {
			return nil, fmt.Errorf("watermark of index %s lane %q: order %q is not an integer", s.cfg.Index, m.Lane, ord)
		}
		m.Ord = o
		if commit != nil {
			m.Commit = *commit
		}
		if through != nil {
			m.Through = *through
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Passed reports whether the index's watermark passes a now, and when not,
// what holds it.
func (s *Store) Passed(ctx context.Context, a cdc.After) (bool, string, error) {
	stored, err := s.Watermarks(ctx)
	if err != nil {
		return false, "", err
	}
	ok, why := passes(a, stored)
	return ok, why, nil
}

// passes is a.Passed over stored marks and when each was written.
func passes(a cdc.After, stored []StoredMark) (bool, string) {
	marks := make([]cdc.Mark, len(stored))
	updated := make([]time.Time, len(stored))
	for i, m := range stored {
		marks[i], updated[i] = m.Mark, m.Updated
	}
	return a.Passed(marks, updated)
}

// ErrNotYet is the error of WaitAfter when the watermark did not pass in
// time: the index may not hold the change yet, so no answer is given as
// if it did.
var ErrNotYet = errors.New("not yet searchable")

// NotYetError says what the watermark held when a wait ended.
type NotYetError struct {
	After  string
	Waited time.Duration
	// Why names the lane that holds the watermark back and where it is.
	Why string
}

func (e *NotYetError) Error() string {
	return fmt.Sprintf("not yet: the index has not reached %s after %s (%s)", e.After, e.Waited.Round(time.Millisecond), e.Why)
}

// Is makes errors.Is(err, ErrNotYet) hold.
func (e *NotYetError) Is(target error) bool { return target == ErrNotYet }

// WaitAfter returns nil once the index's watermark passes a, or a
// *NotYetError after timeout (0: check once), or ctx's error when ctx
// ends first.
//
// However many readers wait, a Store holds one connection for them: it
// LISTENs on WatermarkChannel, and at each notification for its index
// (and every second, in case one was missed) it reads the marks once and
// releases every waiter they pass. It closes the connection once nobody
// has waited for a while.
func (s *Store) WaitAfter(ctx context.Context, a cdc.After, timeout time.Duration) error {
	start := time.Now()
	w := &markWaiter{after: a, done: make(chan struct{})}
	watch := s.watch()
	if timeout > 0 {
		watch.add(w)
		defer watch.remove(w)
	}
	// Checked after registering: a mark written from here on wakes the
	// watch, which checks again.
	ok, why, err := s.Passed(ctx, a)
	if err != nil || ok {
		return err
	}
	if timeout <= 0 {
		return &NotYetError{After: a.Text, Why: why}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	// One last look, so that the reason is current.
	if ok, why, err = s.Passed(ctx, a); err != nil || ok {
		return err
	}
	return &NotYetError{After: a.Text, Waited: time.Since(start), Why: why}
}

// markWaiter is one reader waiting in WaitAfter.
type markWaiter struct {
	after cdc.After
	done  chan struct{}
}

// markWatch is a Store's one listening connection and its waiters.
type markWatch struct {
	s       *Store
	mu      sync.Mutex
	waiters map[*markWaiter]struct{}
	running bool
	// wake ends the listener's current wait (nil: not waiting), so that it
	// closes the connection as soon as the last waiter is gone.
	wake context.CancelFunc
}

func (s *Store) watch() *markWatch {
	s.watchOnce.Do(func() {
		s.marksWatch = &markWatch{s: s, waiters: map[*markWaiter]struct{}{}}
	})
	return s.marksWatch
}

func (m *markWatch) add(w *markWaiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiters[w] = struct{}{}
	if !m.running {
		m.running = true
		go m.listen()
	}
}

func (m *markWatch) remove(w *markWaiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.waiters, w)
	if len(m.waiters) == 0 && m.wake != nil {
		m.wake()
	}
}

// listen holds the listening connection (ListenMarks) while anyone
// waits: at every notification for the index, and at least every second
// (a notification is lost while the connection is down), it reads the
// marks once and releases the waiters they pass. It ends, closing the
// connection, when nobody waits.
func (m *markWatch) listen() {
	const poll = time.Second
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		for ctx.Err() == nil {
			// Returns when the connection fails; listen again after a
			// pause, the poll covering the gap.
			_ = m.s.ListenMarks(ctx, notify)
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
		}
	}()
	defer func() { stop(); <-listening }()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		m.mu.Lock()
		if len(m.waiters) == 0 {
			m.running = false
			m.wake = nil
			m.mu.Unlock()
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		m.wake = cancel
		m.mu.Unlock()
		m.check(ctx)
		select {
		case <-kick:
		case <-t.C:
		case <-wctx.Done(): // the last waiter left
		}
		cancel()
	}
}

// check reads the marks once and releases every waiter they pass.
func (m *markWatch) check(ctx context.Context) {
	m.mu.Lock()
	n := len(m.waiters)
	m.mu.Unlock()
	if n == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, err := m.s.Watermarks(cctx)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.waiters {
		if ok, _ := passes(w.after, stored); ok {
			close(w.done)
			delete(m.waiters, w)
		}
	}
}
