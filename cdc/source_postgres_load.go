package cdc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// loadPlan is an initial load ready to run: a read-only transaction on the
// snapshot to load, and the LSN its rows are versioned at.
type loadPlan struct {
	conn   *pgx.Conn
	tx     pgx.Tx
	at     pglogrepl.LSN
	tables [][2]string // schema, table
}

func (l *loadPlan) close() {
	_ = l.tx.Rollback(context.Background())
	l.conn.Close(context.Background())
}

// planLoad opens the load's transaction: on the slot's exported snapshot
// when snapshot is set, else on a fresh one.
func (s *PostgresSource) planLoad(ctx context.Context, conn *pgx.Conn, snapshot string, at pglogrepl.LSN) (*loadPlan, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("initial load: begin: %w", err)
	}
	l := &loadPlan{conn: conn, tx: tx, at: at}
	if snapshot != "" {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET TRANSACTION SNAPSHOT '%s'", snapshot)); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("initial load: import snapshot %s: %w", snapshot, err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2", s.cfg.Publication)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("initial load: list tables: %w", err)
	}
	for rows.Next() {
		var t [2]string
		if err := rows.Scan(&t[0], &t[1]); err != nil {
			rows.Close()
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("initial load: list tables: %w", err)
		}
		l.tables = append(l.tables, t)
	}
	rows.Close()
	return l, nil
}

// initialLoad reads every published table in the plan's snapshot and hands
// the rows over as op "r" changes versioned at the plan's LSN: below every
// streamed change, so the stream always wins. Tables with a primary key are
// read in key order, and each batch's Ack records the last key it carried,
// so a load cut short resumes after it instead of starting over: the rows
// before it were loaded, and whatever happened to them since is streamed.
// The last batch's Ack records the load as done.
func (s *PostgresSource) initialLoad(ctx context.Context, st *setupResult) error {
	l := st.load
	defer func() { l.close(); st.load = nil }()
	start := time.Now()
	total := 0
	from, err := s.cfg.LoadState.LoadProgress(ctx, s.cfg.Slot)
	if err != nil {
		return fmt.Errorf("read progress: %w", err)
	}
	if from.Table != "" {
		s.log.Info("initial load resumes", "table", from.Table, "after_key", strings.Join(from.Key, ","))
	} else {
		// A start line: the load may take long, and only "done" followed.
		s.log.Info("initial load started", "slot", s.cfg.Slot, "tables", len(l.tables))
	}
	var msgs []Message
	for _, t := range l.tables {
		name := t[0] + "." + t[1]
		var after []string
		switch {
		case from.Table == "":
		case name < from.Table:
			continue // loaded before the interruption
		case name == from.Table:
			after = from.Key
		}
		n, err := s.loadTable(ctx, l, t[0], t[1], after, &msgs)
		if err != nil {
			return err
		}
		total += n
	}
	if err := l.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	done := func(ctx context.Context) error {
		if err := s.cfg.LoadState.MarkLoadDone(ctx, s.cfg.Slot); err != nil {
			return fmt.Errorf("record initial load of slot %q: %w", s.cfg.Slot, err)
		}
		s.log.Info("initial load done", "rows", total, "tables", len(l.tables), "duration", time.Since(start).String())
		return nil
	}
	// The final batch (maybe empty) carries the record that the load is
	// done, so it is written only after every loaded row is in the sink.
	if !s.emit(ctx, s.batch(msgs, 0, done)) {
		return ctx.Err()
	}
	return nil
}

// LoadProgress is how far an interrupted initial load got: every row of the
// tables sorting before Table ("schema.table") and of Table up to primary
// key Key (the key columns' text) is in the sink.
type LoadProgress struct {
	Table string
	Key   []string
}

// loadTable reads one table in text format, so values decode exactly as
// pgoutput's do: by primary key pages after the key after (nil: from the
// start) when the table has one, else through a cursor, whole.
func (s *PostgresSource) loadTable(ctx context.Context, l *loadPlan, schema, table string, after []string, msgs *[]Message) (int, error) {
	name := pgx.Identifier{schema, table}.Sanitize()
	keys := s.pkeys[schema+"."+table]
	var rel *pgRelation
	n := 0
	// page reads one page and queues its rows; it returns the row count
	// and the last row's key text.
	page := func(sql string, args [][]byte) (int, []string, error) {
		rr := l.conn.PgConn().ExecParams(ctx, sql, args, nil, nil, nil)
		if rel == nil {
			rel = &pgRelation{schema: schema, table: table}
			for _, fd := range rr.FieldDescriptions() {
				rel.cols = append(rel.cols, pgColumn{name: fd.Name, oid: fd.DataTypeOID, key: contains(keys, fd.Name)})
			}
		}
		got := 0
		var last []string
		for rr.NextRow() {
			got++
			row := make(map[string]any, len(rel.cols))
			last = make([]string, len(keys)) // in key order, for the next page's WHERE
			for i, raw := range rr.Values() {
				c := rel.cols[i]
				if raw == nil {
					row[c.name] = nil
					continue
				}
				if k := slices.Index(keys, c.name); k >= 0 {
					last[k] = string(raw)
				}
				row[c.name] = pgValueOrText(c.oid, string(raw))
			}
			m, err := pgMessage(s.db, s.cfg.Slot, pgRow{op: OpRead, rel: rel, after: row, lsn: l.at}, l.at, 0, time.Now(), true)
			if err != nil {
				rr.Close()
				return got, nil, err
			}
			*msgs = append(*msgs, m)
		}
		if _, err := rr.Close(); err != nil {
			return got, nil, fmt.Errorf("read %s: %w", name, err)
		}
		return got, last, nil
	}
	flush := func(progress *LoadProgress) bool {
		for len(*msgs) >= s.cfg.BatchSize || (progress != nil && len(*msgs) > 0) {
			k := min(len(*msgs), s.cfg.BatchSize)
			b := append([]Message(nil), (*msgs)[:k]...)
			*msgs = append((*msgs)[:0:0], (*msgs)[k:]...)
			var hook func(context.Context) error
			if progress != nil && len(*msgs) == 0 {
				p := *progress
				hook = func(ctx context.Context) error { return s.cfg.LoadState.SaveLoadProgress(ctx, s.cfg.Slot, p) }
			}
			if !s.emit(ctx, s.batch(b, 0, hook)) {
				return false
			}
		}
		return true
	}

	if len(keys) == 0 {
		if _, err := l.tx.Exec(ctx, "DECLARE ragsync_load NO SCROLL CURSOR FOR SELECT * FROM "+name); err != nil {
			return 0, fmt.Errorf("read %s: %w", name, err)
		}
		for {
			got, _, err := page("FETCH 1000 FROM ragsync_load", nil)
			n += got
			if err != nil {
				return n, err
			}
			if !flush(nil) {
				return n, ctx.Err()
			}
			if got == 0 {
				break
			}
		}
		if _, err := l.tx.Exec(ctx, "CLOSE ragsync_load"); err != nil {
			return n, fmt.Errorf("read %s: %w", name, err)
		}
		return n, nil
	}

	cols := make([]string, len(keys))
	params := make([]string, len(keys))
	for i, k := range keys {
		cols[i] = pgx.Identifier{k}.Sanitize()
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	order := strings.Join(cols, ", ")
	for {
		// The key's text goes back as untyped parameters: the server reads
		// them as the columns' types, whatever those are.
		sql := fmt.Sprintf("SELECT * FROM %s ORDER BY %s LIMIT %d", name, order, s.cfg.BatchSize)
		var args [][]byte
		if after != nil {
			sql = fmt.Sprintf("SELECT * FROM %s WHERE (%s) > (%s) ORDER BY %s LIMIT %d", name, order, strings.Join(params, ", "), order, s.cfg.BatchSize)
			for _, a := range after {
				args = append(args, []byte(a))
			}
		}
		got, last, err := page(sql, args)
		n += got
		if err != nil {
			return n, err
		}
		if got == 0 {
			return n, nil
		}
		after = slices.Clone(last)
		if !flush(&LoadProgress{Table: schema + "." + table, Key: after}) {
			return n, ctx.Err()
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
