package monitor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
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
	var w savedWindow
	err := s.pool.QueryRow(ctx, "SELECT seen, last_chunk_id, pinned_at FROM "+s.tWindows+" WHERE index_name = $1 AND name = $2",
		s.index, name).Scan(&w.seen, &w.lastID, &w.pinnedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, false, nil
	}
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, s.index, err)
	}
	rows, err := s.pool.Query(ctx, "SELECT embedding FROM "+s.tWinVecs+" WHERE index_name = $1 AND name = $2 ORDER BY slot", s.index, name)
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, s.index, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[pgvector.Vector])
	if err != nil {
		return w, false, fmt.Errorf("load drift window %s of %s: %w", name, s.index, err)
	}
	for _, v := range vs {
		w.vecs = append(w.vecs, v.Slice())
	}
	return w, true, nil
}

// saveWindow replaces a window's vectors in one transaction.
func (s *store) saveWindow(ctx context.Context, name string, w savedWindow) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+s.tWindows+" (index_name, name, seen, last_chunk_id, pinned_at) VALUES ($1, $2, $3, $4, $5)"+
			" ON CONFLICT (index_name, name) DO UPDATE SET seen = excluded.seen, last_chunk_id = excluded.last_chunk_id, pinned_at = excluded.pinned_at",
			s.index, name, w.seen, w.lastID, w.pinnedAt)
		if err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, s.index, err)
		}
		if w.same {
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.tWinVecs+" WHERE index_name = $1 AND name = $2 AND slot >= $3", s.index, name, len(w.vecs)); err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, s.index, err)
		}
		if len(w.vecs) == 0 {
			return nil
		}
		slots := make([]int32, len(w.vecs))
		vecs := make([]pgvector.Vector, len(w.vecs))
		for i, v := range w.vecs {
			slots[i], vecs[i] = int32(i), pgvector.NewVector(v)
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+s.tWinVecs+" (index_name, name, slot, embedding) SELECT $1, $2, u.slot, u.embedding"+
			" FROM unnest($3::int[], $4::vector[]) AS u(slot, embedding)"+
			" ON CONFLICT (index_name, name, slot) DO UPDATE SET embedding = excluded.embedding", s.index, name, slots, vecs)
		if err != nil {
			return fmt.Errorf("save drift window %s of %s: %w", name, s.index, err)
		}
		return nil
	})
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
	rows, err := m.st.pool.Query(ctx, "SELECT name, pinned_at FROM "+m.st.tWindows+" WHERE index_name = $1 AND name = ANY($2) AND pinned_at IS NOT NULL",
		m.st.index, []string{winReference, winQueryRef})
	if err != nil {
		return fmt.Errorf("save drift windows of %s: %w", m.st.index, err)
	}
	var name string
	var pinned time.Time
	var elsewhere []string
	_, err = pgx.ForEachRow(rows, []any{&name, &pinned}, func() error {
		if mine := map[string]time.Time{winReference: m.pinnedAt, winQueryRef: m.qPinned}[name]; !pinned.Equal(mine) {
			elsewhere = append(elsewhere, name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save drift windows of %s: %w", m.st.index, err)
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
	order := "ASC"
	if newest {
		order = "DESC"
	}
	rows, err := s.pool.Query(ctx, "SELECT id, embedding FROM "+s.tChunks+" WHERE index_name = $1 AND id > $2 ORDER BY id "+order+" LIMIT $3",
		s.index, after, n)
	if err != nil {
		return nil, nil, fmt.Errorf("read new chunk vectors of %s: %w", s.index, err)
	}
	defer rows.Close()
	var ids []int64
	var vecs [][]float32
	for rows.Next() {
		var id int64
		var v pgvector.Vector
		if err := rows.Scan(&id, &v); err != nil {
			return nil, nil, err
		}
		ids, vecs = append(ids, id), append(vecs, v.Slice())
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if newest {
		slices.Reverse(ids)
		slices.Reverse(vecs)
	}
	return ids, vecs, nil
}

// ResetReference pins a new drift reference: a uniform sample of
// monitor.reference_size chunk vectors of the index as it is now. The
// current window starts empty and fills with chunks written from now on.
func (m *Monitor) ResetReference(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	// A manual command: one scan of the index's chunks is acceptable here.
	rows, err := s.pool.Query(ctx, "SELECT embedding FROM "+s.tChunks+" WHERE index_name = $1 ORDER BY random() LIMIT $2", s.index, m.cfg.ReferenceSize)
	if err != nil {
		return 0, fmt.Errorf("pin drift reference of %s: %w", s.index, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[pgvector.Vector])
	if err != nil {
		return 0, fmt.Errorf("pin drift reference of %s: %w", s.index, err)
	}
	vecs := make([][]float32, len(vs))
	for i, v := range vs {
		vecs[i] = v.Slice()
	}
	var maxID int64
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+s.tChunks+" WHERE index_name = $1", s.index).Scan(&maxID); err != nil {
		return 0, fmt.Errorf("pin drift reference of %s: %w", s.index, err)
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
