package cdc

import (
	"context"
	"fmt"
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
// streamed change, so the stream always wins. The last batch's Ack records
// the load as done; until then a restart loads again.
func (s *PostgresSource) initialLoad(ctx context.Context, st *setupResult) error {
	l := st.load
	defer func() { l.close(); st.load = nil }()
	start := time.Now()
	total := 0
	var msgs []Message
	for _, t := range l.tables {
		n, err := s.loadTable(ctx, l, t[0], t[1], &msgs)
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

// loadTable reads one table through a cursor, in text format so values
// decode exactly as pgoutput's do.
func (s *PostgresSource) loadTable(ctx context.Context, l *loadPlan, schema, table string, msgs *[]Message) (int, error) {
	name := pgx.Identifier{schema, table}.Sanitize()
	if _, err := l.tx.Exec(ctx, "DECLARE ragsync_load NO SCROLL CURSOR FOR SELECT * FROM "+name); err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	keys := s.pkeys[schema+"."+table]
	var rel *pgRelation
	n := 0
	for {
		rr := l.conn.PgConn().ExecParams(ctx, "FETCH 1000 FROM ragsync_load", nil, nil, nil, nil)
		if rel == nil {
			rel = &pgRelation{schema: schema, table: table}
			for _, fd := range rr.FieldDescriptions() {
				rel.cols = append(rel.cols, pgColumn{name: fd.Name, oid: fd.DataTypeOID, key: contains(keys, fd.Name)})
			}
		}
		got := 0
		for rr.NextRow() {
			got++
			row := make(map[string]any, len(rel.cols))
			for i, raw := range rr.Values() {
				if raw == nil {
					row[rel.cols[i].name] = nil
					continue
				}
				row[rel.cols[i].name] = pgValueOrText(rel.cols[i].oid, string(raw))
			}
			m, err := pgMessage(s.db, s.cfg.Slot, pgRow{op: OpRead, rel: rel, after: row, lsn: l.at}, l.at, 0, time.Now(), true)
			if err != nil {
				rr.Close()
				return n, err
			}
			*msgs = append(*msgs, m)
		}
		if _, err := rr.Close(); err != nil {
			return n, fmt.Errorf("read %s: %w", name, err)
		}
		n += got
		for len(*msgs) >= s.cfg.BatchSize {
			b := append([]Message(nil), (*msgs)[:s.cfg.BatchSize]...)
			*msgs = append((*msgs)[:0:0], (*msgs)[s.cfg.BatchSize:]...)
			if !s.emit(ctx, s.batch(b, 0, nil)) {
				return n, ctx.Err()
			}
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

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
