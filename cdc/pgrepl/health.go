package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// slotHealth holds why the slot cannot be used, "" while it can.
type slotHealth struct {
	mu  sync.Mutex
	msg string
}

func (h *slotHealth) set(msg string) {
	h.mu.Lock()
	h.msg = msg
	h.mu.Unlock()
}

func (h *slotHealth) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.msg
}

// lagTracker keeps the commit time of each transaction handed over and not
// yet confirmed, oldest first: the slot's lag is the age of the oldest.
type lagTracker struct {
	mu      sync.Mutex
	pending []lagEntry
}

type lagEntry struct {
	end pglogrepl.LSN
	ts  time.Time
}

func (l *lagTracker) add(end pglogrepl.LSN, ts time.Time) {
	l.mu.Lock()
	l.pending = append(l.pending, lagEntry{end, ts})
	l.mu.Unlock()
}

// confirm drops the transactions up to upTo and returns the commit time
// of the last of them (zero when none).
func (l *lagTracker) confirm(upTo pglogrepl.LSN) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	var last time.Time
	for i < len(l.pending) && l.pending[i].end <= upTo {
		last = l.pending[i].ts
		i++
	}
	l.pending = l.pending[i:]
	return last
}

func (l *lagTracker) seconds(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		return 0
	}
	return max(0, now.Sub(l.pending[0].ts).Seconds())
}

// SlotStatus is the slot as the source server sees it.
type SlotStatus struct {
	// Exists is false when the slot is gone.
	Exists bool
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
	// RetainedWALBytes is how much WAL the server keeps for the slot.
	RetainedWALBytes int64
	// Active says whether a consumer is streaming from it.
	Active bool
}

// ReadSlotStatus reads slot's status through conn, an ordinary connection
// to the source database.
func ReadSlotStatus(ctx context.Context, conn *pgx.Conn, slot string) (SlotStatus, error) {
	var st SlotStatus
	var walStatus *string
	var retained *int64
	err := conn.QueryRow(ctx, `
SELECT wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, active
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&walStatus, &retained, &st.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read slot %q: %w", slot, err)
	}
	st.Exists = true
	if walStatus != nil {
		st.WALStatus = *walStatus
	}
	if retained != nil {
		st.RetainedWALBytes = *retained
	}
	return st, nil
}

// slotMetrics are the source's gauges, read at scrape time.
type slotMetrics struct {
	mu       sync.Mutex
	retained float64
}

// monitor checks the slot every HealthInterval: it publishes the retained
// WAL, warns past MaxRetainedWALBytes (a stopped or stuck consumer makes the
// source keep WAL until its disk is full) and marks the source unhealthy
// when the slot is lost, which /readyz reports with the fix.
func (s *Source) monitor(ctx context.Context) {
	check := func() {
		conn, err := s.connectSQL(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("slot check: cannot reach the source database", "error", err)
			}
			return
		}
		defer conn.Close(context.Background())
		st, err := ReadSlotStatus(ctx, conn, s.cfg.Slot)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("slot check failed", "error", err)
			}
			return
		}
		s.metrics.mu.Lock()
		s.metrics.retained = float64(st.RetainedWALBytes)
		s.metrics.mu.Unlock()
		switch {
		case !st.Exists:
			s.health.set(fmt.Sprintf("replication slot %q is gone (dropped outside ragsync): restart serve to recreate it and reload the tables", s.cfg.Slot))
		case st.WALStatus == "lost":
			s.health.set(fmt.Sprintf("replication slot %q was invalidated (the WAL it needed is gone): run `ragsync slot drop` and restart serve, which recreates it and reloads the tables; raise max_slot_wal_keep_size so it does not happen again", s.cfg.Slot))
		default:
			s.health.set("")
		}
		if b := s.cfg.MaxRetainedWALBytes; b > 0 && st.RetainedWALBytes > b {
			s.log.Warn("replication slot retains more WAL than source.postgres.max_retained_wal_bytes: the source's disk fills while ragsync lags or is stopped; if ragsync will not come back, run `ragsync slot drop`",
				"retained_wal_bytes", st.RetainedWALBytes, "max_retained_wal_bytes", b, "wal_status", st.WALStatus)
		}
	}
	check()
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// loadProgress is the initial load's progress while one runs: tables read
// of the tables to read. It ends when the record that the load is done has
// been saved, which happens only once every loaded row is in the sink.
type loadProgress struct {
	mu          sync.Mutex
	active      bool
	read, total int
}

func (p *loadProgress) start(read, total int) {
	p.mu.Lock()
	p.active, p.read, p.total = true, read, total
	p.mu.Unlock()
}

func (p *loadProgress) tableRead() {
	p.mu.Lock()
	p.read = min(p.read+1, p.total)
	p.mu.Unlock()
}

func (p *loadProgress) finish() {
	p.mu.Lock()
	p.active = false
	p.mu.Unlock()
}

// get returns "" when no load runs.
func (p *loadProgress) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active {
		return ""
	}
	return fmt.Sprintf("initial load in progress: %d of %d tables", p.read, p.total)
}

// Unhealthy returns why the slot cannot be used, with the fix, or "" while
// it can; until the initial load is done (every loaded row in the sink), it
// says how far the load is: the index does not have the tables' rows yet,
// so /readyz must not send queries to it. Safe for concurrent use.
func (s *Source) Unhealthy() string {
	if msg := s.health.get(); msg != "" {
		return msg
	}
	return s.load.get()
}

// register adds the source's metrics to reg.
func (s *Source) register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragsync_source_slot_retained_wal_bytes",
			Help: "WAL the source server retains for the replication slot (current WAL position minus the slot's restart_lsn).",
		}, func() float64 {
			s.metrics.mu.Lock()
			defer s.metrics.mu.Unlock()
			return s.metrics.retained
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragsync_source_slot_lag_seconds",
			Help: "Age of the oldest transaction received from the slot whose changes are not all in the sink yet; 0 when caught up.",
		}, func() float64 { return s.lag.seconds(time.Now()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragsync_source_reconnects_total",
			Help: "Times the replication connection was lost and opened again.",
		}, func() float64 { return float64(s.reconnect.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register postgres source metrics: %w", err)
		}
	}
	return nil
}
