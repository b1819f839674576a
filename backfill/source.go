package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgsnap"
)

// table is a Table resolved against the source catalog.
type table struct {
	Table
	schema, name string
	ident        string // quoted schema.table
	oid          uint32
	types        []string // format_type of each id column
	total        int64    // rows to read: count(*), or pg_class's estimate for huge tables
	exact        bool     // total is a count, not an estimate
	lastKey      []string // keyset position: id column values as text
	done         bool
	read         int64 // rows read in this table so far, this run and before
	// whole: read from its start in this run's snapshot, without a Where,
	// so it is reconciled once read (reconcile.go).
	whole   bool
	applied chan struct{} // closed once the table's rows are applied
	listed  bool          // its documents whose rows are gone are listed
	gone    []string      // keys of those left to delete
}

// Source yields the rows of the configured tables as snapshot-read changes,
// one page per batch; a batch's Ack saves the table's checkpoint.
// It is used by one pipeline goroutine; Progress may be called from any.
type Source struct {
	cfg    Config
	pool   *pgxpool.Pool
	cp     Checkpoints
	db     string
	tables []*table
	cur    int
	rec    *table // the table being reconciled, if any
	snap   *snapshot
	lim    *rate.Limiter
	// pageRows is the rows one page reads: cfg.PageRows, fewer under a
	// rate (one second's worth).
	pageRows int

	mu   sync.Mutex
	prog Progress
	// source names the database read (cdc.PostgresSource): the rows'
	// versions carry it, and reconcile judges only its documents.
	source string
}

// checkWholeRead refuses a run that would reconcile a table the role reads
// through row-level security: the read would hold only the rows the
// policies show, and every other document would look gone.
func (s *Source) checkWholeRead(ctx context.Context) error {
	if s.cfg.Reconcile == nil {
		return nil
	}
	// Every table, not only those read whole: with row_security off
	// (Open) a filtered table fails to read at all, so say why first.
	var names [][2]string
	for _, t := range s.cfg.Tables {
		if schema, name, err := splitName(t.Name); err == nil {
			names = append(names, [2]string{schema, name})
		}
	}
	if len(names) == 0 {
		return nil
	}
	filtered, err := cdc.FilteredTables(ctx, s.pool, names)
	if err != nil {
		return err
	}
	if len(filtered) == 0 {
		return nil
	}
	var role string
	if err := s.pool.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return fmt.Errorf("read the role: %w", err)
	}
	return &cdc.ErrFilteredRead{Role: role, Tables: filtered,
		Fix: "run backfill with --no-reconcile (it then indexes the rows the role sees and deletes nothing)"}
}

// Progress is what a Source has done so far.
type Progress struct {
	Table      string // the table being read
	Rows       int64  // rows read (all tables, this run)
	Superseded int64  // rows skipped: changed after the snapshot, the stream carries them
	Rechecked  int64  // rows whose xmax made them re-read outside the snapshot
	Total      int64  // rows to read (all tables, this run; estimated for huge tables)
	Exact      bool   // Total is a count
	Position   string // WAL position of the snapshot, "X/Y"
	Done       bool
	// Reconciled counts the documents whose rows are gone that
	// reconciliation handed to the pipeline as deletes (a dry run's sink
	// only counts them).
	Reconciled int64
	// LeftAlone counts documents older than the snapshot that
	// reconciliation could not judge and kept: versions that are not this
	// database's WAL positions, or keys that do not read back as the id
	// columns.
	LeftAlone int64
	// Unreconciled counts the tables not reconciled because they are not
	// read whole in this run's snapshot (a Where, or a resumed table).
	Unreconciled int
	// Refused lists, in a dry run, the reconciles that would stop the run
	// because they exceed Config.ReconcileLimit (nothing was deleted).
	Refused []*cdc.ReconcileRefused
	// Source is the source the run's versions name (cdc.PostgresSource).
	Source string
}

// Open connects to the source, resolves every table's id columns and size,
// checks each --where, and, with cfg.Resume, loads their checkpoints from
// cp (nil keeps none). A checkpoint written for other key columns or
// another --where is refused with the difference spelled out: its position
// means nothing in this run's keyset. The caller closes the Source.
func Open(ctx context.Context, cfg Config, cp Checkpoints) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("backfill source url: %w", err)
	}
	// One connection holds the snapshot, one re-checks rows outside it.
	pc.MaxConns = 2
	pc.ConnConfig.RuntimeParams["application_name"] = "ragsync-backfill"
	if cfg.Reconcile != nil {
		// A reconcile must read every row: with row_security off, a policy
		// that would filter a read makes it fail instead (as pg_dump does),
		// whatever init's check below missed.
		pc.ConnConfig.RuntimeParams["row_security"] = "off"
	}
	// Values are read as text in the formats the Postgres source reads
	// them in (UTC timestamps, hex bytea, …), so a row becomes the same
	// document whether it is backfilled or streamed.
	cdc.PostgresSessionParams(pc.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect source: %w", err)
	}
	s := &Source{cfg: cfg, pool: pool, cp: cp}
	s.pageRows = cfg.PageRows
	if cfg.Rate > 0 {
		// The rate holds per row, over any second: a page is at most one
		// second's rows, and its rows are paid for before they are read.
		// The limiter starts empty, so the first page waits too.
		s.pageRows = min(cfg.PageRows, max(1, int(cfg.Rate)))
		s.lim = rate.NewLimiter(rate.Limit(cfg.Rate), s.pageRows)
		s.lim.AllowN(time.Now(), s.pageRows)
	}
	if err := s.init(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Source) init(ctx context.Context) error {
	if err := s.pool.QueryRow(ctx, "SELECT current_database()").Scan(&s.db); err != nil {
		return fmt.Errorf("connect source: %w (check --source-url)", err)
	}
	src, err := cdc.ReadPostgresSource(ctx, s.pool)
	if err != nil {
		return err
	}
	if s.cfg.DebeziumServer != "" {
		src = "dbz:" + s.cfg.DebeziumServer + "/" + s.db
	}
	s.source, s.prog.Source = src, src
	if err := s.checkWholeRead(ctx); err != nil {
		return err
	}
	var errs []error
	for _, t := range s.cfg.Tables {
		tb, err := s.resolve(ctx, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.tables = append(s.tables, tb)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if s.cp != nil {
		names := make([]string, len(s.tables))
		for i, t := range s.tables {
			names[i] = t.Name
		}
		if !s.cfg.Resume {
			if err := s.cp.Reset(ctx, names); err != nil {
				return err
			}
		} else {
			var errs []error
			for _, t := range s.tables {
				c, ok, err := s.cp.Load(ctx, t.Name)
				if err != nil {
					return err
				}
				if d := c.Mismatch(t.ID, t.Where); ok && d != "" {
					errs = append(errs, fmt.Errorf("backfill --resume %s: the checkpoint does not belong to this run: %s; run without --resume to start the table over", t.Name, d))
					continue
				}
				if ok {
					t.lastKey, t.done, t.read = c.LastKey, c.Done, c.Rows
					s.cfg.Logger.InfoContext(ctx, "resuming backfill", "table", t.Name, "after_key", strings.Join(c.LastKey, ","), "rows_before", c.Rows, "done", c.Done)
				}
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
		}
	}
	for _, t := range s.tables {
		if !t.done {
			s.prog.Total += max(t.total-t.read, 0)
		}
		t.whole = t.Where == "" && t.lastKey == nil && !t.done
		if s.cfg.Reconcile != nil && !t.whole {
			s.prog.Unreconciled++
			why := "--where reads part of the table"
			if t.Where == "" {
				why = "resumed: rows before the checkpoint were read in an earlier snapshot"
			}
			s.cfg.Logger.InfoContext(ctx, "backfill will not delete the table's documents whose rows are gone", "table", t.Name, "reason", why)
		}
	}
	s.prog.Exact = true
	for _, t := range s.tables {
		s.prog.Exact = s.prog.Exact && t.exact
	}
	return nil
}

// resolve finds t's id columns and their types, and checks its Where.
func (s *Source) resolve(ctx context.Context, t Table) (*table, error) {
	schema, name, _ := splitName(t.Name)
	tb := &table{Table: t, schema: schema, name: name, ident: pgx.Identifier{schema, name}.Sanitize()}
	var reltuples float64
	err := s.pool.QueryRow(ctx, "SELECT c.oid, c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
		schema, name).Scan(&tb.oid, &reltuples)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("backfill table %s: no such table in database %s (check --table / tables[].match and --source-url)", t.Name, s.db)
	}
	if err != nil {
		return nil, fmt.Errorf("backfill table %s: %w", t.Name, err)
	}
	if len(t.ID) == 0 {
		rows, err := s.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod)
			FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1 AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`, tb.oid)
		if err != nil {
			return nil, fmt.Errorf("backfill table %s: read primary key: %w", t.Name, err)
		}
		for rows.Next() {
			var col, typ string
			if err := rows.Scan(&col, &typ); err != nil {
				return nil, err
			}
			tb.ID, tb.types = append(tb.ID, col), append(tb.types, typ)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("backfill table %s: read primary key: %w", t.Name, err)
		}
		if len(tb.ID) == 0 {
			return nil, fmt.Errorf("backfill table %s: no primary key, set tables[].id to unique not-null columns to page by", t.Name)
		}
	} else {
		for _, col := range t.ID {
			var typ string
			err := s.pool.QueryRow(ctx, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped", tb.oid, col).Scan(&typ)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, fmt.Errorf("backfill table %s: id column %q does not exist (fix tables[].id)", t.Name, col)
			}
			if err != nil {
				return nil, fmt.Errorf("backfill table %s: %w", t.Name, err)
			}
			tb.types = append(tb.types, typ)
		}
	}
	if err := s.checkWhere(ctx, tb); err != nil {
		return nil, err
	}
	// A huge table is not counted: pg_class's estimate is good enough for
	// an ETA and costs nothing.
	if reltuples >= 1e6 {
		tb.total = int64(reltuples)
		if t.Where == "" {
			return tb, nil
		}
	}
	q := "SELECT count(*) FROM " + tb.ident + " t" + tb.whereSQL("WHERE")
	if reltuples >= 1e6 {
		q = "EXPLAIN " + q // checks Where without counting
		_, err = s.pool.Exec(ctx, q)
	} else {
		err = s.pool.QueryRow(ctx, q).Scan(&tb.total)
		tb.exact = true
	}
	if err != nil {
		return nil, fmt.Errorf("backfill table %s: %w (check --where)", t.Name, err)
	}
	return tb, nil
}

func (t *table) whereSQL(kw string) string {
	if t.Where == "" {
		return ""
	}
	return " " + kw + " (" + t.Where + ")"
}

// Close ends the snapshot and disconnects.
func (s *Source) Close() {
	if s.snap != nil {
		s.snap.close(context.Background())
		s.snap = nil
	}
	s.pool.Close()
}

// Progress returns what the source has read so far. Safe for concurrent use.
func (s *Source) Progress() Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog
}

// Total is the number of rows table will read (a count, or pg_class's
// estimate for huge tables), 0 for a table it does not read.
func (s *Source) Total(table string) int64 {
	for _, t := range s.tables {
		if t.Name == table {
			return t.total
		}
	}
	return 0
}

// Position is the WAL position of the snapshot this run reads in, 0 before
// the first Fetch.
func (s *Source) Position() uint64 {
	if s.snap == nil {
		return 0
	}
	return s.snap.position
}

// Fetch reads the next page. It returns io.EOF once every table is read.
func (s *Source) Fetch(ctx context.Context) (cdc.Batch, error) {
	if s.rec != nil {
		if b, ok, err := s.reconcileNext(ctx); ok || err != nil {
			return b, err
		}
	}
	for s.cur < len(s.tables) && s.tables[s.cur].done {
		s.cur++
	}
	if s.cur >= len(s.tables) {
		if s.snap != nil {
			s.snap.close(ctx)
			s.snap = nil
		}
		s.mu.Lock()
		s.prog.Done = true
		s.mu.Unlock()
		return cdc.Batch{}, io.EOF
	}
	if s.snap == nil {
		var oids []uint32
		for _, t := range s.tables {
			if t.whole && s.cfg.Reconcile != nil {
				oids = append(oids, t.oid)
			}
		}
		snap, err := begin(ctx, s.pool, oids)
		if err != nil {
			return cdc.Batch{}, err
		}
		s.snap = snap
		s.mu.Lock()
		s.prog.Position = formatLSN(snap.position)
		s.mu.Unlock()
		s.cfg.Logger.InfoContext(ctx, "backfill snapshot taken", "lsn", formatLSN(snap.position), "snapshot", snap.name)
	}
	t := s.tables[s.cur]
	s.mu.Lock()
	s.prog.Table = t.Name
	s.mu.Unlock()
	msgs, last, err := s.page(ctx, t)
	if err != nil {
		return cdc.Batch{}, err
	}
	if last == nil {
		// The table is read: its empty batch's Ack marks it done.
		t.done = true
		cp := Checkpoint{Table: t.Name, KeyColumns: t.ID, Where: t.Where, LastKey: t.lastKey, Position: formatLSN(s.snap.position), Rows: t.read, Done: true}
		s.cfg.Logger.InfoContext(ctx, "backfill table read", "table", t.Name, "rows", t.read)
		ack := s.ack(cp)
		if t.whole && s.cfg.Reconcile != nil {
			ack = s.reconcileAfter(t, ack)
		}
		return cdc.Batch{Ack: ack}, nil
	}
	t.lastKey = last
	cp := Checkpoint{Table: t.Name, KeyColumns: t.ID, Where: t.Where, LastKey: last, Position: formatLSN(s.snap.position), Rows: t.read}
	return cdc.Batch{Records: msgs, Ack: s.ack(cp)}, nil
}

func (s *Source) ack(cp Checkpoint) func(context.Context) error {
	if s.cp == nil {
		return nil
	}
	return func(ctx context.Context) error { return s.cp.Save(ctx, cp) }
}

// reader is how t's rows are read: in pages by its id columns, which are
// also the document's, in this run's snapshot, with their row versions for
// the recheck.
func (t *table) reader() pgsnap.Table {
	return pgsnap.Table{Schema: t.schema, Name: t.name, Keys: t.ID, KeyTypes: t.types, IDs: t.ID, Where: t.Where, RowVersions: true}
}

// page reads the next page of t and returns its messages and the page's
// last key, nil when the table has no more rows.
func (s *Source) page(ctx context.Context, t *table) ([]cdc.Record, []string, error) {
	if s.lim != nil {
		if err := s.lim.WaitN(ctx, s.pageRows); err != nil {
			return nil, nil, err
		}
	}
	page, err := t.reader().Page(ctx, s.snap.tx.Conn().PgConn(), t.lastKey, s.pageRows)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", t.Name, err)
	}
	if len(page) == 0 {
		return nil, nil, nil
	}
	now := time.Now()
	v := s.rowVersion(now)
	msgs := make([]cdc.Record, 0, len(page))
	var superseded, rechecked int64
	for _, r := range page {
		if r.XMax != "0" {
			rechecked++
			same, err := s.recheck(ctx, t, r.KeyText, r.XMin)
			if err != nil {
				return nil, nil, err
			}
			if !same {
				superseded++
				continue
			}
		}
		msgs = append(msgs, s.message(t, r, v, now))
	}
	t.read += int64(len(page))
	s.mu.Lock()
	s.prog.Rows += int64(len(page))
	s.prog.Superseded += superseded
	s.prog.Rechecked += rechecked
	s.mu.Unlock()
	return msgs, page[len(page)-1].KeyText, nil
}

// params renders "$n::type, …" for t's id columns, starting at n.
func (s *Source) params(t *table, n int) string {
	ps := make([]string, len(t.types))
	for i, typ := range t.types {
		ps[i] = fmt.Sprintf("$%d::text::%s", n+i, typ)
	}
	return strings.Join(ps, ", ")
}

// recheck decides a row that a transaction the snapshot does not see had
// touched (xmax set) when it was read: locked it, or changed it, perhaps
// writing before the snapshot position and committing after — then its
// streamed change has a smaller LSN than the snapshot's and must still win.
// FOR SHARE waits for any such transaction still running; then the row is
// unchanged since the snapshot iff its current version has the same xmin
// (a lock or an aborted change), and only then is the snapshot's copy
// trusted. Otherwise the change committed after the snapshot, the stream
// delivers it, and the row is skipped.
func (s *Source) recheck(ctx context.Context, t *table, key []string, xmin string) (bool, error) {
	cols := make([]string, len(t.ID))
	for i, c := range t.ID {
		cols[i] = "t." + pgx.Identifier{c}.Sanitize()
	}
	q := "SELECT t.xmin::text FROM " + t.ident + " t WHERE (" + strings.Join(cols, ", ") + ") = (" + s.params(t, 1) + ") FOR SHARE"
	args := make([]any, len(key))
	for i, k := range key {
		args[i] = k
	}
	var cur string
	err := s.pool.QueryRow(ctx, q, args...).Scan(&cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return false, fmt.Errorf("recheck %s: %w (the backfill user needs SELECT and UPDATE on the table to wait for concurrent writers with FOR SHARE: GRANT UPDATE ON %s TO <user>)", t.Name, err, t.ident)
	}
	if err != nil {
		return false, fmt.Errorf("recheck %s: %w", t.Name, err)
	}
	return cur == xmin, nil
}

// message hands row r of t over as a snapshot read at version v. A row
// whose id columns are null (or whose only one is empty) is no document:
// it goes over as the reason, and stops the run.
func (s *Source) message(t *table, r pgsnap.Row, v cdc.Version, now time.Time) cdc.Record {
	coord := cdc.Coord{Topic: s.cfg.Topic + "." + t.Name, Offset: int64(s.snap.position)}
	m := cdc.Record{Raw: cdc.Raw{Topic: coord.Topic, Offset: coord.Offset, Timestamp: now}}
	if r.DocKey == "" {
		m.Err = &cdc.DecodeError{Coord: coord, Reason: "no document key: an id column is null or empty",
			Err: fmt.Errorf("table %s, id columns %s = %q", t.Name, strings.Join(t.ID, ", "), r.KeyText)}
		return m
	}
	ch := cdc.Change{Op: cdc.OpRead, Table: t.reader().Change(), DocKey: r.DocKey, Key: r.Key, After: r.After, Version: v, Coord: coord}
	m.Change = &ch
	return m
}

// PageRows is how many rows one page (one batch) holds.
func (s *Source) PageRows() int { return s.cfg.PageRows }
