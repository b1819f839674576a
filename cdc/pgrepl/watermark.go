package pgrepl

import (
	"context"
	"sync"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// watermarkProbe is how often an idle slot asks the server for its
// position (a standby status with a reply requested): the watermark of a
// slot with nothing to stream follows the server's WAL within about this
// long, so a reader waiting for the position of a commit that carried
// nothing for the publication is not kept waiting until the server's next
// keepalive (wal_sender_timeout / 2).
const watermarkProbe = 100 * time.Millisecond

// idleSlack is how far behind the server's clock an idle slot's time
// watermark stays. A transaction takes its commit time before its commit
// record is written and flushed, so for a moment a commit stamped before
// the server's clock may still be missing from the WAL sent; a second
// covers a slow flush. Positions (LSNs) have no such window.
const idleSlack = time.Second

// slotMarks is what the watermark says beside the acknowledged LSN: the
// commit time of the last acknowledged transaction, and the time an idle
// slot is through.
type slotMarks struct {
	mu       sync.Mutex
	commit   time.Time
	through  time.Time
	caughtUp bool
}

// committed notes the commit time of the last acknowledged transaction:
// every change committed before it was decoded before it.
func (m *slotMarks) committed(ts time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ts.After(m.commit) {
		m.commit = ts
	}
	if ts.After(m.through) {
		m.through = ts
	}
	m.caughtUp = false
}

// idle notes that everything the server sent up to its time at is
// acknowledged.
func (m *slotMarks) idle(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.caughtUp = true
	if t := at.Add(-idleSlack); t.After(m.through) {
		m.through = t
	}
}

// Marks returns the slot's watermark: the acknowledged LSN (an idle slot's
// moves with the server's position), the commit time of the last
// acknowledged transaction, and the time watermark. Nothing before the
// first acknowledgement or idle confirmation.
func (s *Source) Marks(context.Context) ([]cdc.Mark, error) {
	lsn := s.acked.Load()
	if lsn == 0 {
		return nil, nil
	}
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	return []cdc.Mark{cdc.LSNMark(s.source, lsn, s.marks.commit, s.marks.through, s.marks.caughtUp)}, nil
}
