package pgrepl

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
)

// watermarkProbe is how often an idle slot asks the server for its
// position (a standby status with a reply requested): the watermark of a
// slot with nothing to stream follows the server's WAL within about this
// long, so a reader waiting for the position of a commit that carried
// nothing for the publication is not kept waiting until the server's next
// keepalive (wal_sender_timeout / 2).
const watermarkProbe = 100 * time.Millisecond

// clockProbe is how often the server's clock and WAL insert position are
// read (one SELECT on a connection of the source's own): once the slot
// has acknowledged up to that position, every transaction committed
// before that time (less cdc.CommitSlack) is in the index, so the time
// watermark of an idle slot follows the server's clock.
const clockProbe = 250 * time.Millisecond

// slotMarks is what the watermark says beside the acknowledged LSN: the
// commit time of the last acknowledged transaction, and the server's
// clock at positions read from it.
type slotMarks struct {
	mu     sync.Mutex
	commit time.Time
	// probes are recent readings of the server's clock and WAL insert
	// position, oldest first.
	probes []clockReading
}

type clockReading struct {
	at  time.Time
	lsn pglogrepl.LSN
}

// committed notes the commit time of the last acknowledged transaction.
func (m *slotMarks) committed(ts time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts.After(m.commit) {
		m.commit = ts
	}
}

// read notes a reading of the server's clock and WAL position.
func (m *slotMarks) read(at time.Time, lsn pglogrepl.LSN) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probes = append(m.probes, clockReading{at: at, lsn: lsn})
	if len(m.probes) > 64 {
		m.probes = m.probes[len(m.probes)-64:]
	}
}

// through is the time watermark at acked: the later of the last
// acknowledged commit and the latest reading whose position is
// acknowledged, less cdc.CommitSlack; whether a reading passed says the slot
// has caught up with the server at some point.
func (m *slotMarks) through(acked pglogrepl.LSN) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.commit
	caught := false
	for i := len(m.probes) - 1; i >= 0; i-- {
		if m.probes[i].lsn <= acked {
			if m.probes[i].at.After(t) {
				t = m.probes[i].at
			}
			caught = true
			// Readings this old are passed for good.
			m.probes = m.probes[i:]
			break
		}
	}
	if t.IsZero() {
		return t, caught
	}
	return t.Add(-cdc.CommitSlack), caught
}

// readClock reads the server's clock and WAL insert position every
// clockProbe on a connection of its own, until ctx ends. The clock is read
// first: every commit record written before it is at or before the
// position read after it.
func (s *Source) readClock(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(clockProbe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			c, err := s.connectSQL(ctx)
			if err != nil {
				continue // the slot check warns about an unreachable source
			}
			conn = c
		}
		var at time.Time
		var lsn string
		err := conn.QueryRow(ctx, "SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text").Scan(&at, &lsn)
		if err != nil {
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if l, err := pglogrepl.ParseLSN(lsn); err == nil {
			s.marks.read(at, l)
		}
	}
}

// Marks returns the slot's watermark: the acknowledged LSN (an idle slot's
// moves with the server's position), the commit time of the last
// acknowledged transaction, and the time watermark (see slotMarks.through).
// Nothing before the first acknowledgement or idle confirmation.
func (s *Source) Marks(context.Context) ([]cdc.Mark, error) {
	lsn := s.acked.Load()
	if lsn == 0 {
		return nil, nil
	}
	through, caught := s.marks.through(pglogrepl.LSN(lsn))
	s.marks.mu.Lock()
	commit := s.marks.commit
	s.marks.mu.Unlock()
	return []cdc.Mark{cdc.LSNMark(s.source, lsn, commit, through, caught && s.unacked.Load() == 0)}, nil
}
