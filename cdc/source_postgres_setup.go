package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// setupResult is what setup leaves for run: the replication connection,
// where to start streaming, and the initial load if one is due.
type setupResult struct {
	repl  *pgconn.PgConn
	start pglogrepl.LSN
	load  *loadPlan
}

func (r *setupResult) close() {
	if r.load != nil {
		r.load.close()
	}
	if r.repl != nil {
		r.repl.Close(context.Background())
	}
}

// connectSQL opens an ordinary connection to the source database with the
// session settings the value decoder expects.
func (s *PostgresSource) connectSQL(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("source.postgres.url: %w", err)
	}
	sessionParams(cfg.RuntimeParams, s.cfg.ApplicationName)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to source.postgres.url: %w", err)
	}
	return conn, nil
}

// setup checks the source, creates the publication and the slot if absent
// and decides whether the tables must be loaded.
func (s *PostgresSource) setup(ctx context.Context) (res *setupResult, err error) {
	conn, err := s.connectSQL(ctx)
	if err != nil {
		return nil, err
	}
	keepConn := false
	defer func() {
		if !keepConn {
			conn.Close(context.Background())
		}
	}()
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&s.db); err != nil {
		return nil, fmt.Errorf("read source database name: %w", err)
	}
	if s.cfg.StopAtEnd {
		var at string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&at); err != nil {
			return nil, fmt.Errorf("read the source's WAL position: %w", err)
		}
		if s.stopAt, err = pglogrepl.ParseLSN(at); err != nil {
			return nil, fmt.Errorf("read the source's WAL position: %w", err)
		}
	}
	if err := s.checkSource(ctx, conn); err != nil {
		return nil, err
	}
	slot, err := s.waitSlotFree(ctx, conn)
	if err != nil {
		return nil, err
	}
	if slot != nil {
		switch {
		case slot.plugin != "pgoutput":
			return nil, fmt.Errorf("source.postgres.slot: slot %q uses plugin %q, ragsync needs pgoutput: choose another slot name", s.cfg.Slot, slot.plugin)
		case slot.database != s.db:
			return nil, fmt.Errorf("source.postgres.slot: slot %q belongs to database %q, not %q: choose another slot name", s.cfg.Slot, slot.database, s.db)
		case slot.walStatus == "lost":
			err := &slotError{msg: fmt.Sprintf("source.postgres.slot: slot %q was invalidated (the WAL it needed is gone): run `ragsync slot drop` and restart serve, which recreates it and reloads the tables; raise max_slot_wal_keep_size so it does not happen again", s.cfg.Slot)}
			s.health.set(err.Error())
			return nil, err
		}
	}

	repl, err := s.connectReplication(ctx)
	if err != nil {
		return nil, err
	}
	res = &setupResult{repl: repl}
	defer func() {
		if err != nil {
			res.close()
			res = nil
		}
	}()
	if slot == nil {
		action := "NOEXPORT_SNAPSHOT"
		if s.cfg.InitialLoad {
			// The exported snapshot is exactly the data before the slot's
			// consistent point: loading it and streaming from that point
			// neither loses nor doubles a row.
			action = "EXPORT_SNAPSHOT"
		}
		s.log.Info("creating replication slot; this waits for transactions running on the source to finish")
		created, err := pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
		if err != nil {
			return res, fmt.Errorf("create replication slot %q: %w (the role needs REPLICATION, and max_replication_slots a free slot)", s.cfg.Slot, err)
		}
		if res.start, err = pglogrepl.ParseLSN(created.ConsistentPoint); err != nil {
			return res, fmt.Errorf("create replication slot %q: consistent point: %w", s.cfg.Slot, err)
		}
		s.log.Info("replication slot created", "lsn", res.start.String())
		if s.cfg.InitialLoad {
			// The snapshot lives until the next command on the replication
			// connection: import it before anything else happens there.
			if res.load, err = s.planLoad(ctx, conn, created.SnapshotName, res.start); err != nil {
				return res, err
			}
			keepConn = true
			// A new slot loads everything, whatever an old slot of the same
			// name recorded.
			if err := s.cfg.LoadState.ForgetLoad(ctx, s.cfg.Slot); err != nil {
				return res, fmt.Errorf("reset initial load state of slot %q: %w", s.cfg.Slot, err)
			}
		}
		return res, nil
	}
	res.start = slot.confirmed
	if !s.cfg.InitialLoad {
		return res, nil
	}
	done, err := s.cfg.LoadState.LoadDone(ctx, s.cfg.Slot)
	if err != nil {
		return res, fmt.Errorf("read initial load state of slot %q: %w", s.cfg.Slot, err)
	}
	if !done {
		// An earlier load did not finish and its snapshot is gone. A fresh
		// snapshot taken now, versioned at the slot's confirmed position,
		// converges all the same: every change after that position is
		// streamed again with a higher version and wins.
		s.log.Warn("initial load did not finish before; loading again", "lsn", res.start.String())
		if res.load, err = s.planLoad(ctx, conn, "", res.start); err != nil {
			return res, err
		}
		keepConn = true
	}
	return res, nil
}

// checkSource reports every problem of the source at once, each with its fix.
func (s *PostgresSource) checkSource(ctx context.Context, conn *pgx.Conn) error {
	var errs []error
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		errs = append(errs, fmt.Errorf("source database: wal_level is %q, logical replication needs \"logical\": run ALTER SYSTEM SET wal_level = logical and restart Postgres", walLevel))
	}
	var pubExists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", s.cfg.Publication).Scan(&pubExists); err != nil {
		return fmt.Errorf("read publications: %w", err)
	}
	if !pubExists {
		if err := s.createPublication(ctx, conn); err != nil {
			errs = append(errs, err)
			return errors.Join(errs...)
		}
	}
	rows, err := conn.Query(ctx, `
SELECT p.schemaname, p.tablename, c.relreplident::text,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_publication_tables p
JOIN pg_namespace n ON n.nspname = p.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
WHERE p.pubname = $1 ORDER BY 1, 2`, s.cfg.Publication)
	if err != nil {
		return fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
	}
	n := 0
	var tables [][2]string
	for rows.Next() {
		var schema, table, ident string
		var pk bool
		if err := rows.Scan(&schema, &table, &ident, &pk); err != nil {
			return fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
		}
		n++
		tables = append(tables, [2]string{schema, table})
		name := pgx.Identifier{schema, table}.Sanitize()
		switch {
		case ident == "n", ident == "d" && !pk:
			// Without a replica identity Postgres refuses the table's
			// updates and deletes outright once it is published.
			errs = append(errs, fmt.Errorf("table %s.%s has no replica identity, so its deletes carry no key: run ALTER TABLE %s REPLICA IDENTITY FULL, or add a primary key", schema, table, name))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
	}
	if s.pkeys, err = primaryKeys(ctx, conn, tables); err != nil {
		return err
	}
	if n == 0 {
		errs = append(errs, fmt.Errorf("source.postgres.publication: %q publishes no table: add the tables (ALTER PUBLICATION %s ADD TABLE schema.table) or choose another publication", s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize()))
	}
	return errors.Join(errs...)
}

// createPublication creates the publication FOR TABLE the configured tables.
func (s *PostgresSource) createPublication(ctx context.Context, conn *pgx.Conn) error {
	if len(s.cfg.Tables) == 0 {
		return fmt.Errorf("source.postgres.publication: %q does not exist and tables[].match names no table: list the tables as schema.table, or create the publication yourself", s.cfg.Publication)
	}
	var names []string
	for _, t := range s.cfg.Tables {
		schema, table, ok := strings.Cut(t, ".")
		if !ok || strings.ContainsAny(t, "*?[") {
			return fmt.Errorf("tables[].match: %q is not a schema.table name, so ragsync cannot create publication %q for it: name the tables exactly, or create the publication yourself and set source.postgres.publication", t, s.cfg.Publication)
		}
		names = append(names, pgx.Identifier{schema, table}.Sanitize())
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{s.cfg.Publication}.Sanitize(), strings.Join(names, ", "))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create publication: %s: %w (the role must own the tables; or create it yourself and set source.postgres.publication)", sql, err)
	}
	s.log.Info("publication created", "publication", s.cfg.Publication, "tables", strings.Join(s.cfg.Tables, ","))
	return nil
}

// waitSlotFree returns the slot (nil if absent) once no connection holds
// it. After a crash the old walsender keeps the slot until it notices its
// client is gone, which can take up to wal_sender_timeout, or until a slot
// creation it was waiting in gives up; a new process waits for that rather
// than failing.
func (s *PostgresSource) waitSlotFree(ctx context.Context, conn *pgx.Conn) (*slotRow, error) {
	wait := 200 * time.Millisecond
	for logged := false; ; {
		slot, err := readSlot(ctx, conn, s.cfg.Slot)
		if err != nil || slot == nil || slot.activePID == 0 {
			return slot, err
		}
		if !logged {
			s.log.Warn("replication slot is in use by another connection; waiting for it to be released (a previous ragsync's walsender exits within wal_sender_timeout; if another ragsync streams from this slot, give this one its own source.postgres.slot)",
				"pid", slot.activePID)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("replication slot %q is in use by pid %d: %w", s.cfg.Slot, slot.activePID, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// slotRow is a row of pg_replication_slots.
type slotRow struct {
	plugin, database, walStatus string
	confirmed                   pglogrepl.LSN
	activePID                   int32
}

// readSlot returns the slot, or nil if it does not exist.
func readSlot(ctx context.Context, conn *pgx.Conn, name string) (*slotRow, error) {
	var r slotRow
	var confirmed *string
	var plugin, database, walStatus *string
	var pid *int32
	err := conn.QueryRow(ctx, `SELECT plugin, database, wal_status, confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &database, &walStatus, &confirmed, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replication slot %q: %w", name, err)
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	r.plugin, r.database, r.walStatus = deref(plugin), deref(database), deref(walStatus)
	if pid != nil {
		r.activePID = *pid
	}
	if confirmed != nil {
		if r.confirmed, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return nil, fmt.Errorf("read replication slot %q: %w", name, err)
		}
	}
	return &r, nil
}

// DropSlot drops the replication slot of cfg (`ragsync slot drop`), and
// forgets its initial load so a new slot loads the tables again. It fails
// while a consumer is streaming from the slot: stop serve first.
func DropSlot(ctx context.Context, cfg PostgresConfig) error {
	cfg = cfg.withDefaults()
	s := &PostgresSource{cfg: cfg}
	conn, err := s.connectSQL(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var active bool
	err = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("replication slot %q does not exist", cfg.Slot)
	}
	if err != nil {
		return fmt.Errorf("read replication slot %q: %w", cfg.Slot, err)
	}
	if active {
		return fmt.Errorf("replication slot %q is in use: stop `ragsync serve` first", cfg.Slot)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot); err != nil {
		return fmt.Errorf("drop replication slot %q: %w", cfg.Slot, err)
	}
	return cfg.LoadState.ForgetLoad(ctx, cfg.Slot)
}

// primaryKeys returns each table's primary key columns, in key order.
func primaryKeys(ctx context.Context, conn *pgx.Conn, tables [][2]string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, t := range tables {
		rows, err := conn.Query(ctx, `
SELECT a.attname FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.ord`, pgx.Identifier{t[0], t[1]}.Sanitize())
		if err != nil {
			return nil, fmt.Errorf("read primary key of %s.%s: %w", t[0], t[1], err)
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("read primary key of %s.%s: %w", t[0], t[1], err)
		}
		if len(cols) > 0 {
			out[t[0]+"."+t[1]] = cols
		}
	}
	return out, nil
}
