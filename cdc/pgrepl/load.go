package pgrepl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgsnap"
)

// loadPlan is an initial load ready to run: a read-only transaction on the
// snapshot to load, the LSN its rows are versioned at, and the load's
// record (its tables in order, and where it stopped if it is resumed).
type loadPlan struct {
	conn *pgx.Conn
	tx   pgx.Tx
	at   pglogrepl.LSN
	rec  LoadRecord
}

func (l *loadPlan) close() {
	_ = l.tx.Rollback(context.Background())
	l.conn.Close(context.Background())
}

// planLoad opens the load's transaction: on the slot's exported snapshot
// when snapshot is set, else on a fresh one.
func (s *Source) planLoad(ctx context.Context, conn *pgx.Conn, snapshot string, at pglogrepl.LSN, rec LoadRecord) (*loadPlan, error) {
	tx, err := pgsnap.Begin(ctx, conn, snapshot)
	if err != nil {
		return nil, fmt.Errorf("initial load: %w", err)
	}
	return &loadPlan{conn: conn, tx: tx, at: at, rec: rec}, nil
}

// initialLoad reads the load's tables, in the order recorded when it began,
// and hands the rows over as op "r" changes versioned at the plan's LSN:
// below every streamed change, so the stream always wins. Tables with a
// primary key are read in key order, and each batch's Ack records the last
// key it carried, so a load cut short resumes after it instead of starting
// over: the rows before it were loaded, and whatever happened to them since
// is streamed. The last batch's Ack records the load as done.
func (s *Source) initialLoad(ctx context.Context, st *setupResult) error {
	l := st.load
	defer func() { l.close(); st.load = nil }()
	start := time.Now()
	rec := l.rec
	if err := s.cfg.State.SaveLoad(ctx, s.cfg.Slot, rec); err != nil {
		return fmt.Errorf("record the load of slot %q: %w", s.cfg.Slot, err)
	}
	// Skip by position in the recorded list, never by comparing names:
	// Go's byte order and the server's collation disagree.
	from := 0
	if rec.Table != "" {
		if i := slices.Index(rec.Pending, rec.Table); i >= 0 {
			from = i
			s.log.Info("initial load resumes", "table", rec.Table, "after_key", strings.Join(rec.Key, ","))
		}
	}
	if from == 0 && rec.Table == "" {
		// A start line: the load may take long, and only "done" followed.
		s.log.Info("initial load started", "tables", len(rec.Pending))
	}
	byName := map[string]*tableInfo{}
	for _, t := range s.tables {
		byName[t.name] = t
	}
	total := 0
	var msgs []cdc.Record
	for i, name := range rec.Pending[from:] {
		t := byName[name]
		if t == nil || !t.matched {
			s.log.Warn("initial load: table no longer published or in tables[]; skipped", "table", name)
			continue
		}
		var after []string
		if i == 0 && rec.Table == name {
			after = rec.Key
		}
		n, err := s.loadTable(ctx, l, t, after, &msgs)
		if err != nil {
			return err
		}
		total += n
		s.load.tableRead()
	}
	if err := l.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if rec.Fenced && s.cfg.Index != nil {
		n, err := s.reconcile(ctx, l, rec.Pending, &msgs)
		if err != nil {
			return err
		}
		s.log.Info("initial load: documents whose rows are gone deleted", "documents", n)
	}
	done := func(ctx context.Context) error {
		final := LoadRecord{Loaded: mergeNames(rec.Loaded, rec.Pending), Source: rec.Source, Succeeds: rec.Succeeds}
		if err := s.cfg.State.SaveLoad(ctx, s.cfg.Slot, final); err != nil {
			return fmt.Errorf("record initial load of slot %q: %w", s.cfg.Slot, err)
		}
		s.log.Info("initial load done", "rows", total, "tables", len(rec.Pending), "duration", time.Since(start).String())
		s.load.finish()
		return nil
	}
	// The final batch (maybe empty) carries the record that the load is
	// done, so it is written only after every loaded row is in the sink.
	if !s.emit(ctx, s.batch(msgs, 0, done)) {
		return ctx.Err()
	}
	return nil
}

func mergeNames(a, b []string) []string {
	out := slices.Clone(a)
	if out == nil {
		out = []string{}
	}
	for _, n := range b {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// loadTable reads one table (cdc/pgsnap), so values decode exactly as
// pgoutput's do: by primary key pages after the key after (nil: from the
// start) when the table has one, else through a cursor, whole.
func (s *Source) loadTable(ctx context.Context, l *loadPlan, t *tableInfo, after []string, msgs *[]cdc.Record) (int, error) {
	tb := t.reader()
	n, keyless := 0, 0
	// queue hands the rows over as changes.
	queue := func(rows []pgsnap.Row) {
		ts := time.UnixMilli(time.Now().UnixMilli()).UTC()
		v := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(l.at), 0}, TS: uint64(max(ts.UnixMilli(), 0)), Snapshot: true, Source: s.source}
		for _, r := range rows {
			if r.DocKey == "" {
				keyless++
				continue
			}
			ch := cdc.Change{Op: cdc.OpRead, Table: t.name, DocKey: r.DocKey, Key: r.Key, After: r.After, Version: v,
				Coord: cdc.Coord{Topic: s.cfg.Slot + "." + t.schema + "." + t.table, Offset: int64(l.at)}}
			*msgs = append(*msgs, message(ch, ts))
		}
	}
	flush := func(progress *LoadRecord) bool {
		for len(*msgs) >= s.cfg.BatchSize || (progress != nil && len(*msgs) > 0) {
			k := min(len(*msgs), s.cfg.BatchSize)
			b := append([]cdc.Record(nil), (*msgs)[:k]...)
			*msgs = append((*msgs)[:0:0], (*msgs)[k:]...)
			var hook func(context.Context) error
			if progress != nil && len(*msgs) == 0 {
				p := progress.clone()
				hook = func(ctx context.Context) error { return s.cfg.State.SaveLoad(ctx, s.cfg.Slot, p) }
			}
			if !s.emit(ctx, s.batch(b, 0, hook)) {
				return false
			}
		}
		return true
	}
	defer func() {
		if keyless > 0 {
			s.log.Warn("initial load: rows without a document id were not loaded (a tables[].id column is null)", "table", t.name, "rows", keyless, "id", strings.Join(t.ids, ","))
		}
	}()
	conn := l.conn.PgConn()
	name := t.sql()

	if len(tb.Keys) == 0 {
		cur, err := tb.Open(ctx, conn)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", name, s.classifyLoad(err, t))
		}
		for {
			rows, err := cur.Next(ctx, 1000)
			n += len(rows)
			if err != nil {
				return n, fmt.Errorf("read %s: %w", name, s.classifyLoad(err, t))
			}
			queue(rows)
			if !flush(nil) {
				return n, ctx.Err()
			}
			if len(rows) == 0 {
				break
			}
		}
		if err := cur.Close(ctx); err != nil {
			return n, fmt.Errorf("read %s: %w", name, err)
		}
		return n, nil
	}

	for {
		rows, err := tb.Page(ctx, conn, after, s.cfg.BatchSize)
		n += len(rows)
		if err != nil {
			return n, fmt.Errorf("read %s: %w", name, s.classifyLoad(err, t))
		}
		if len(rows) == 0 {
			return n, nil
		}
		queue(rows)
		after = rows[len(rows)-1].KeyText
		p := l.rec
		p.Table, p.Key = t.name, after
		if !flush(&p) {
			return n, ctx.Err()
		}
	}
}

// reconcile deletes, once every loaded row is in the index, the documents
// of tables that the load did not write and that are older than it: their
// rows were not in the load's snapshot, so they are gone from the source.
// The deletes carry the load's version, so a change streamed after the
// snapshot (a higher version) is never undone: the sink's fence keeps it.
// Only a load that read one snapshot from its start may do this; one
// resumed on a later snapshot skipped rows it had loaded before.
func (s *Source) reconcile(ctx context.Context, l *loadPlan, tables []string, msgs *[]cdc.Record) (int, error) {
	// Wait until everything loaded so far is applied: the index must
	// hold this load's versions before it is compared with them.
	applied := make(chan struct{})
	if !s.emit(ctx, s.batch(*msgs, 0, func(context.Context) error { close(applied); return nil })) {
		return 0, ctx.Err()
	}
	*msgs = nil
	select {
	case <-applied:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	ts := time.UnixMilli(time.Now().UnixMilli()).UTC()
	v := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(l.at), 0}, TS: uint64(max(ts.UnixMilli(), 0)), Snapshot: true, Source: s.source}
	n := 0
	for _, name := range tables {
		var t *tableInfo
		for _, ti := range s.tables {
			if ti.name == name && ti.matched {
				t = ti
			}
		}
		if t == nil {
			continue
		}
		var gone []string
		census, err := cdc.Outdated(ctx, s.cfg.Index, name, v, cdc.OutdatedOptions{Succeeds: l.rec.Succeeds}, func(key string) error { gone = append(gone, key); return nil })
		if err != nil {
			return n, fmt.Errorf("reconcile %s: %w", name, err)
		}
		if census.LeftAlone() > 0 {
			s.log.Warn("initial load: documents another source wrote (another database, server or connector), or stored before versions named their source, left alone (their rows may be gone)", "table", name, "documents", census.LeftAlone())
		}
		if err := cdc.CheckReconcile(name, gone, census.Live, s.cfg.ReconcileLimit); err != nil {
			// Serve cannot ask: it deletes nothing of this table, says so,
			// and streams on. The documents stay until a backfill that is
			// allowed to delete them, or their rows' next change.
			s.log.Error("initial load: reconcile refused, nothing deleted", "table", name, "error", err.Error())
			continue
		}
		for _, key := range gone {
			ch := cdc.Change{Op: cdc.OpDelete, Table: name, DocKey: key, Version: v,
				Coord: cdc.Coord{Topic: s.cfg.Slot + "." + t.schema + "." + t.table, Offset: int64(l.at)}}
			*msgs = append(*msgs, message(ch, ts))
			if len(*msgs) >= s.cfg.BatchSize {
				if !s.emit(ctx, s.batch(*msgs, 0, nil)) {
					return n, ctx.Err()
				}
				*msgs = nil
			}
		}
		n += len(gone)
	}
	return n, nil
}

// reader is how the table's rows are read (the initial load, a re-read):
// in primary-key pages, with document ids from its id columns.
func (t *tableInfo) reader() pgsnap.Table {
	return pgsnap.Table{Schema: t.schema, Name: t.table, Keys: t.pk, IDs: t.ids}
}
