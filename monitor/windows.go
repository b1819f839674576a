package monitor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ragsync/ragsync/sink"
)

// Persisted window names.
const (
	winReference = "reference"
	winCurrent   = "current"
	winQueries   = "queries"
	winQueryRef  = "query_reference"
	winQueryCur  = "query_current"
)

type savedWindow struct {
	seen, lastID int64
	pinnedAt     *time.Time
	vecs         [][]float32
	// same says the stored vectors already are vecs: only the header
	// (seen, last chunk id) is written.
	same bool
}

func (s *store) loadWindow(ctx context.Context, name string) (savedWindow, bool, error) {
	w, ok, err := s.ms.LoadWindow(ctx, name)
	return savedWindow{seen: w.Seen, lastID: w.LastID, pinnedAt: w.PinnedAt, vecs: w.Vectors}, ok, err
}

// saveWindow replaces a window's vectors in one transaction.
func (s *store) saveWindow(ctx context.Context, name string, w savedWindow) error {
	return s.ms.SaveWindow(ctx, name, sink.Window{Seen: w.seen, LastID: w.lastID, PinnedAt: w.pinnedAt, Vectors: w.vecs, HeaderOnly: w.same})
}

// loadWindows restores the drift windows a previous run saved.
func (m *Monitor) loadWindows(ctx context.Context) error {
	w := map[string]savedWindow{}
	found := map[string]bool{}
	for _, name := range []string{winReference, winCurrent, winQueries, winQueryRef, winQueryCur} {
		sw, ok, err := m.st.loadWindow(ctx, name)
		if err != nil {
			return err
		}
		w[name], found[name] = sw, ok
	}
	m.saved = map[string]string{}
	if found[winQueryRef] {
		qr, qc := w[winQueryRef], w[winQueryCur]
		m.queryRef.restore(window{vecs: qr.vecs, seen: qr.seen}, window{vecs: qc.vecs, seen: qc.seen})
		m.saved[winQueryRef], m.saved[winQueryCur] = savedKey(len(qr.vecs), qr.pinnedAt), fmt.Sprint(qc.seen)
		if qr.pinnedAt != nil {
			m.qPinned = *qr.pinnedAt
		}
	}
	if !found[winReference] {
		return nil
	}
	ref, cur, q := w[winReference], w[winCurrent], w[winQueries]
	m.drift.restore(window{vecs: ref.vecs, seen: ref.seen}, window{vecs: cur.vecs, seen: cur.seen})
	m.query.restore(window{}, window{vecs: q.vecs, seen: q.seen})
	m.saved[winReference], m.saved[winCurrent], m.saved[winQueries] = savedKey(len(ref.vecs), ref.pinnedAt), fmt.Sprint(cur.seen), fmt.Sprint(q.seen)
	m.lastID = max(ref.lastID, cur.lastID)
	if ref.pinnedAt != nil {
		m.pinnedAt = *ref.pinnedAt
	}
	return nil
}

// saveWindows persists the windows. The ring order is flattened oldest
// first, so a restart continues the ring where it was.
func (m *Monitor) saveWindows(ctx context.Context) error {
	// A reference pinned by `ragsync monitor reference --reset [--queries]`
	// in another process since we loaded wins over our in-memory windows.
	pins, err := m.st.ms.Pins(ctx, []string{winReference, winQueryRef})
	if err != nil {
		return fmt.Errorf("save drift windows of %s: %w", m.st.index, err)
	}
	var elsewhere []string
	for _, name := range []string{winReference, winQueryRef} {
		pinned, ok := pins[name]
		if mine := map[string]time.Time{winReference: m.pinnedAt, winQueryRef: m.qPinned}[name]; ok && !pinned.Equal(mine) {
			elsewhere = append(elsewhere, name)
		}
	}
	if len(elsewhere) > 0 {
		m.logger.InfoContext(ctx, "drift reference was pinned elsewhere; reloading the windows", "windows", elsewhere)
		return m.loadWindows(ctx)
	}
	ref, cur := m.drift.snapshot()
	_, q := m.query.snapshot()
	qr, qc := m.queryRef.snapshot()
	pinOf := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	pin, qpin := pinOf(m.pinnedAt), pinOf(m.qPinned)
	// Rewrite a window's vectors only when they changed since the last
	// save: the reference is frozen once full (its seen count still
	// grows), and a ring changes only when something was offered. This
	// was a third of a check's CPU (bench/monitor).
	keys := map[string]string{winReference: savedKey(len(ref.vecs), pin), winCurrent: fmt.Sprint(cur.seen), winQueries: fmt.Sprint(q.seen),
		winQueryRef: savedKey(len(qr.vecs), qpin), winQueryCur: fmt.Sprint(qc.seen)}
	save := func(name string, w savedWindow) error {
		w.same = m.saved[name] == keys[name]
		if err := m.st.saveWindow(ctx, name, w); err != nil {
			delete(m.saved, name)
			return err
		}
		m.saved[name] = keys[name]
		return nil
	}
	for _, x := range []struct {
		name string
		w    savedWindow
	}{
		{winReference, savedWindow{seen: ref.seen, lastID: m.lastID, pinnedAt: pin, vecs: ref.vecs}},
		{winCurrent, savedWindow{seen: cur.seen, lastID: m.lastID, vecs: ringOrder(cur)}},
		{winQueries, savedWindow{seen: q.seen, vecs: ringOrder(q)}},
		{winQueryRef, savedWindow{seen: qr.seen, pinnedAt: qpin, vecs: qr.vecs}},
		{winQueryCur, savedWindow{seen: qc.seen, vecs: ringOrder(qc)}},
	} {
		if err := save(x.name, x.w); err != nil {
			return err
		}
	}
	return nil
}

// savedKey identifies a reference's stored vectors: it changes only while
// it fills or when it is pinned.
func savedKey(n int, pin *time.Time) string {
	if pin == nil {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d@%s", n, pin.UTC().Format(time.RFC3339Nano))
}

func ringOrder(w window) [][]float32 {
	if len(w.vecs) < w.cap {
		return w.vecs
	}
	return append(slices.Clone(w.vecs[w.next:]), w.vecs[:w.next]...)
}

// readNewChunks feeds the drift windows with chunks written since the last
// read: the reference's missing part from the oldest, then at most one
// current window's worth of the newest (older ones would be pushed out of
// the ring anyway).
func (m *Monitor) readNewChunks(ctx context.Context) error {
	ref, _ := m.drift.snapshot()
	if need := ref.cap - len(ref.vecs); need > 0 {
		ids, vecs, err := m.st.chunkVectors(ctx, m.lastID, need, false)
		if err != nil {
			return err
		}
		m.drift.Observe(vecs...)
		if len(ids) > 0 {
			m.lastID = ids[len(ids)-1]
		}
		if len(ids) < need {
			return nil
		}
	}
	ids, vecs, err := m.st.chunkVectors(ctx, m.lastID, m.cfg.WindowSize, true)
	if err != nil {
		return err
	}
	m.drift.Observe(vecs...)
	if len(ids) > 0 {
		m.lastID = ids[len(ids)-1]
	}
	return nil
}

// chunkVectors reads up to n chunk vectors with id > after, in id order;
// newest takes the last n instead of the first.
func (s *store) chunkVectors(ctx context.Context, after int64, n int, newest bool) ([]int64, [][]float32, error) {
	return s.ms.ChunkVectors(ctx, after, n, newest)
}

// ResetReference pins a new drift reference: a uniform sample of
// monitor.reference_size chunk vectors of the index as it is now. The
// current window starts empty and fills with chunks written from now on.
func (m *Monitor) ResetReference(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	// A manual command: one scan of the index's chunks is acceptable here.
	vecs, maxID, err := s.ms.RandomVectors(ctx, m.cfg.ReferenceSize)
	if err != nil {
		return 0, fmt.Errorf("pin drift reference: %w", err)
	}
	m.drift.Pin(vecs, m.rng)
	m.saved = map[string]string{} // everything is written in full below or at the next check
	m.lastID = maxID
	m.pinnedAt = m.deps.Now().UTC().Truncate(time.Microsecond)
	ref, cur := m.drift.snapshot()
	if err := s.saveWindow(ctx, winReference, savedWindow{seen: ref.seen, lastID: maxID, pinnedAt: &m.pinnedAt, vecs: ref.vecs}); err != nil {
		return 0, err
	}
	if err := s.saveWindow(ctx, winCurrent, savedWindow{seen: cur.seen, lastID: maxID}); err != nil {
		return 0, err
	}
	return len(vecs), nil
}

// ResetQueryReference pins the query reference to the recent front-door
// queries (the sliding query window, as last saved) and empties that
// window, so query drift is measured from the questions users ask now. It
// returns the number of queries in the new reference.
func (m *Monitor) ResetQueryReference(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	qr, qc := m.queryRef.snapshot()
	recent := ringOrder(qc)
	if len(recent) == 0 && len(qr.vecs) < qr.cap {
		// Still filling: nothing past the reference to pin.
		recent = qr.vecs
	}
	if len(recent) < 50 {
		return 0, fmt.Errorf("pin query reference of %s: only %d recent front-door queries saved, need at least 50 (let serve answer more queries first)", m.st.index, len(recent))
	}
	m.queryRef.Pin(recent, m.rng)
	m.qPinned = m.deps.Now().UTC().Truncate(time.Microsecond)
	delete(m.saved, winQueryRef)
	delete(m.saved, winQueryCur)
	qr, qc = m.queryRef.snapshot()
	if err := m.st.saveWindow(ctx, winQueryRef, savedWindow{seen: qr.seen, pinnedAt: &m.qPinned, vecs: qr.vecs}); err != nil {
		return 0, err
	}
	if err := m.st.saveWindow(ctx, winQueryCur, savedWindow{seen: qc.seen}); err != nil {
		return 0, err
	}
	return len(qr.vecs), nil
}
