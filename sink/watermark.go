package sink

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
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
	marks := make([]cdc.Mark, len(stored))
	updated := make([]time.Time, len(stored))
	for i, m := range stored {
		marks[i], updated[i] = m.Mark, m.Updated
	}
	ok, why := a.Passed(marks, updated)
	return ok, why, nil
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
// *NotYetError after timeout (0: check once). It listens on
// WatermarkChannel on a connection of its own, so it wakes when a
// pipeline writes a mark, and checks again every poll in case a
// notification was missed (a reconnect).
func (s *Store) WaitAfter(ctx context.Context, a cdc.After, timeout time.Duration) error {
	start := time.Now()
	ok, why, err := s.Passed(ctx, a)
	if err != nil || ok {
		return err
	}
	if timeout <= 0 {
		return &NotYetError{After: a.Text, Why: why}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := s.pool.Acquire(wctx)
	if err != nil {
		return fmt.Errorf("wait for the watermark: %w", err)
	}
	// A connection that listened goes back to no pool: closing it ends
	// the LISTEN with it.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(wctx, "LISTEN "+WatermarkChannel); err != nil {
		return fmt.Errorf("wait for the watermark: %w", err)
	}
	const poll = time.Second
	want := s.cfg.Schema + "." + s.cfg.Index
	for {
		// Checked after LISTEN: a write between the first check and
		// LISTEN is seen here.
		if wctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The wait is over: one last look, on the caller's context.
			if ok, why, err = s.Passed(ctx, a); err != nil || ok {
				return err
			}
			return &NotYetError{After: a.Text, Waited: time.Since(start), Why: why}
		}
		ok, why, err = s.Passed(wctx, a)
		if err != nil && wctx.Err() == nil {
			return err
		}
		if ok {
			return nil
		}
		for {
			nctx, ncancel := context.WithTimeout(wctx, poll)
			n, err := pc.WaitForNotification(nctx)
			ncancel()
			if err != nil {
				if wctx.Err() == nil && nctx.Err() == nil {
					return fmt.Errorf("wait for the watermark: %w", err)
				}
				break // poll, or the wait's end
			}
			if n.Payload == want {
				break
			}
		}
	}
}
