package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/fault"
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
func connectSQL(ctx context.Context, url, app string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("source.postgres.url: %w", err)
	}
	sessionParams(cfg.RuntimeParams, app)
	conn, err := fault.Reconnect(ctx, reconnectWithin, func() (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) })
	if err != nil {
		return nil, fmt.Errorf("connect to source.postgres.url: %w", err)
	}
	return conn, nil
}

// reconnectWithin bounds how long a connection the server ended as it
// started (a terminated backend, a restart under way) is made again before
// the error is returned: such a blip at start-up must not stop serve before
// it has created anything, nor fail a health check.
const reconnectWithin = 15 * time.Second

func (s *Source) connectSQL(ctx context.Context) (*pgx.Conn, error) {
	return connectSQL(ctx, s.cfg.URL, s.cfg.ApplicationName)
}

// plan is what the checks found and what setup will create.
type plan struct {
	role       string
	pubExists  bool
	pubCreated bool // recorded as created by ragsync
	slot       *slotRow
	tables     []*tableInfo // the publication's tables (or those to publish), in the order Postgres lists them
	createPub  []*tableInfo // publish these in a new publication
	addToPub   []*tableInfo // add these to the existing publication
	viaRoot    bool
	pubActions []string
	toLoad     []string // tables[] tables whose rows were never loaded for this slot
	record     LoadRecord
	// movedFrom is the identity the slot's loads recorded, when the server
	// now answers with another and the move is adopted.
	movedFrom     string
	freeSlots     int
	superuser     bool
	canCreateInDB bool
}

// setup checks the source, and only then creates the publication and the
// slot if absent, and decides what must be loaded. Whatever this start
// created is dropped again when a later step fails.
func (s *Source) setup(ctx context.Context) (res *setupResult, err error) {
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
	if s.source, err = cdc.ReadPostgresSource(ctx, conn); err != nil {
		return nil, err
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
	p, err := s.check(ctx, conn)
	if err != nil {
		return nil, err
	}

	// Every check passed: create what is missing, undoing it on failure.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if len(p.createPub) > 0 {
		if err := s.createPublication(ctx, conn, p.createPub); err != nil {
			return nil, err
		}
		undo = append(undo, func() { s.dropCreated(conn, KindPublication) })
		s.created = append(s.created, KindPublication)
	}
	if len(p.addToPub) > 0 {
		names := make([]string, len(p.addToPub))
		for i, t := range p.addToPub {
			names[i] = t.sql()
		}
		pub := pgx.Identifier{s.cfg.Publication}.Sanitize()
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(names, ", "))); err != nil {
			return nil, fmt.Errorf("add tables to publication %q: %w", s.cfg.Publication, err)
		}
		s.log.Info("tables added to the publication ragsync created; their rows are loaded before streaming resumes", "publication", s.cfg.Publication, "tables", strings.Join(names, ", "))
		undo = append(undo, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.onLiveConn(ctx, conn, func(c *pgx.Conn) error {
				_, err := c.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", pub, strings.Join(names, ", ")))
				return err
			})
		})
	}
	s.index(p.tables)

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
	if p.slot == nil {
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
		undo = append(undo, func() { s.dropCreated(conn, KindSlot) })
		s.created = append(s.created, KindSlot)
		if err := s.cfg.State.RecordCreated(ctx, KindSlot, s.db, s.cfg.Slot); err != nil {
			return res, fmt.Errorf("record replication slot %q as created by ragsync: %w", s.cfg.Slot, err)
		}
		if res.start, err = pglogrepl.ParseLSN(created.ConsistentPoint); err != nil {
			return res, fmt.Errorf("create replication slot %q: consistent point: %w", s.cfg.Slot, err)
		}
		s.log.Info("replication slot created", "lsn", res.start.String())
		// A new slot loads everything, whatever an old slot of the same
		// name recorded.
		if err := s.cfg.State.ForgetLoad(ctx, s.cfg.Slot); err != nil {
			return res, fmt.Errorf("reset initial load state of slot %q: %w", s.cfg.Slot, err)
		}
		if s.cfg.InitialLoad {
			// The snapshot lives until the next command on the replication
			// connection: import it before anything else happens there.
			rec := LoadRecord{Loaded: []string{}, Pending: s.matchedNames(), Fenced: true, Source: s.source, Succeeds: p.succeeds()}
			if res.load, err = s.planLoad(ctx, conn, created.SnapshotName, res.start, rec); err != nil {
				return res, err
			}
			keepConn = true
		}
		return res, nil
	}
	res.start = p.slot.confirmed
	rec := p.record
	if rec.Exists && rec.Source == "" {
		// A record kept before identities were: the slot exists on this
		// server and database, so the loads it records read this one.
		rec.Source = s.source
		if err := s.cfg.State.SaveLoad(ctx, s.cfg.Slot, rec); err != nil {
			return res, fmt.Errorf("record the identity of slot %q's source: %w", s.cfg.Slot, err)
		}
		p.record = rec
	}
	if !s.cfg.InitialLoad {
		return res, nil
	}
	switch {
	case p.movedFrom != "":
		// An adopted move with the slot in place: load every table again
		// on a snapshot of now, versioned at the confirmed position; its
		// reconcile replaces the old identity's documents.
		s.log.Warn("source moved: loading every table again from the new server", "from", p.movedFrom, "to", s.source)
		rec = LoadRecord{Loaded: []string{}, Pending: s.matchedNames(), Fenced: true, Source: s.source, Succeeds: p.succeeds()}
	case len(rec.Pending) > 0:
		// An earlier load did not finish and its snapshot is gone. A fresh
		// snapshot taken now, versioned at the slot's confirmed position,
		// converges all the same: every change after that position is
		// streamed again with a higher version and wins. It no longer
		// reads one snapshot, so it cannot tell gone rows from rows it
		// skipped: it does not reconcile.
		s.log.Warn("initial load did not finish before; resuming it", "lsn", res.start.String(), "table", rec.Table)
		rec.Fenced = false
		// Tables that joined tables[] meanwhile are loaded after it, in
		// this start: the stream only carries their changes from now on.
		if len(p.toLoad) > 0 {
			s.log.Info("loading tables the slot has not loaded yet after the resumed load", "tables", strings.Join(p.toLoad, ", "))
			rec.Pending = append(slices.Clone(rec.Pending), p.toLoad...)
		}
	case len(p.toLoad) > 0:
		// Tables that joined tables[] (and the publication) since the
		// last load: load them on a snapshot of now, versioned at the
		// confirmed position, for the same reason.
		s.log.Info("loading tables the slot has not loaded yet", "tables", strings.Join(p.toLoad, ", "))
		rec = LoadRecord{Loaded: rec.Loaded, Pending: p.toLoad, Fenced: true, Source: s.source, Succeeds: rec.Succeeds}
	default:
		return res, nil
	}
	if res.load, err = s.planLoad(ctx, conn, "", res.start, rec); err != nil {
		return res, err
	}
	keepConn = true
	return res, nil
}

// succeeds is the lineage the next load record carries: the recorded one,
// plus the identity a move adopted now leaves behind.
func (p *plan) succeeds() []string {
	out := slices.Clone(p.record.Succeeds)
	if p.movedFrom != "" && !slices.Contains(out, p.movedFrom) {
		out = append(out, p.movedFrom)
	}
	return out
}

// index keeps the tables for the stream and the load.
func (s *Source) index(tables []*tableInfo) {
	s.tables = map[string]*tableInfo{}
	for _, t := range tables {
		s.tables[relKey(t.schema, t.table)] = t
	}
}

func relKey(schema, table string) string { return schema + "\x00" + table }

// matchedNames lists the tables[] tables in the publication's order.
func (s *Source) matchedNames() []string {
	var out []string
	for _, t := range s.orderedTables() {
		if t.matched {
			out = append(out, t.name)
		}
	}
	return out
}

func (s *Source) orderedTables() []*tableInfo {
	out := make([]*tableInfo, 0, len(s.tables))
	for _, t := range s.tables {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *tableInfo) int { return int(a.order) - int(b.order) })
	return out
}

// onLiveConn runs f on conn or, when conn's session is gone (the server
// ended it, or the network dropped it: the very failure a start may be
// undoing), on a new connection, so that an undo still reaches the source.
func (s *Source) onLiveConn(ctx context.Context, conn *pgx.Conn, f func(*pgx.Conn) error) error {
	if !conn.IsClosed() {
		err := f(conn)
		if err == nil || !(conn.IsClosed() || fault.Lost(err)) {
			return err
		}
	}
	fresh, err := s.connectSQL(ctx)
	if err != nil {
		return err
	}
	defer fresh.Close(context.Background())
	return f(fresh)
}

// dropCreated undoes a creation of this start: the slot or the publication.
func (s *Source) dropCreated(conn *pgx.Conn, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.onLiveConn(ctx, conn, func(conn *pgx.Conn) error {
		switch kind {
		case KindSlot:
			// The walsender of the replication connection closed just
			// before holds the slot until it exits: a drop meanwhile is
			// refused as in use (55006), so it is tried again until the
			// slot is free.
			for {
				_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s.cfg.Slot)
				var pe *pgconn.PgError
				if err == nil || !errors.As(err, &pe) || pe.Code != "55006" || ctx.Err() != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
			}
		case KindPublication:
			_, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{s.cfg.Publication}.Sanitize())
			return err
		}
		return nil
	})
	if err != nil {
		s.log.Error("could not undo what this failed start created: drop it by hand", "kind", kind, "error", err)
		return
	}
	_ = s.cfg.State.ForgetCreated(ctx, kind, s.db, map[string]string{KindSlot: s.cfg.Slot, KindPublication: s.cfg.Publication}[kind])
	s.log.Info("start failed: dropped what it had created", "kind", kind)
}

// check reads everything setup depends on and reports every problem at
// once, each with its fix. It changes nothing.
func (s *Source) check(ctx context.Context, conn *pgx.Conn) (*plan, error) {
	p := &plan{}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var walLevel string
	var replication bool
	err := conn.QueryRow(ctx, `
SELECT current_setting('wal_level'), current_user, r.rolsuper, r.rolreplication OR r.rolsuper,
       has_database_privilege(current_database(), 'CREATE'),
       current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)
FROM pg_roles r WHERE r.rolname = current_user`).Scan(&walLevel, &p.role, &p.superuser, &replication, &p.canCreateInDB, &p.freeSlots)
	if err != nil {
		return nil, fmt.Errorf("read the source's settings: %w", err)
	}
	if walLevel != "logical" {
		add("source database: wal_level is %q, logical replication needs \"logical\": run ALTER SYSTEM SET wal_level = logical and restart Postgres", walLevel)
	}
	if !replication {
		add("source database: role %q may not replicate: run ALTER ROLE %s REPLICATION (as a superuser), or connect as a role that may", p.role, pgx.Identifier{p.role}.Sanitize())
	}

	// The publication.
	var viaRoot, allTables, ins, upd, del, trunc bool
	err = conn.QueryRow(ctx, `SELECT pubviaroot, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, s.cfg.Publication).
		Scan(&viaRoot, &allTables, &ins, &upd, &del, &trunc)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
	default:
		p.pubExists, p.viaRoot = true, viaRoot
		for _, a := range []struct {
			on   bool
			name string
		}{{ins, "insert"}, {upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
			if !a.on {
				p.pubActions = append(p.pubActions, a.name)
			}
		}
		if p.pubCreated, err = s.cfg.State.Created(ctx, KindPublication, s.db, s.cfg.Publication); err != nil {
			return nil, fmt.Errorf("read what ragsync created: %w", err)
		}
	}
	if len(p.pubActions) > 0 {
		add("source.postgres.publication: %q does not publish %s, so those changes would never reach the index: run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')",
			s.cfg.Publication, strings.Join(p.pubActions, ", "), pgx.Identifier{s.cfg.Publication}.Sanitize())
	}

	// The slot, before any table check: a slot that cannot be used makes
	// them moot, and a gone publication under an existing slot is its own
	// failure.
	if p.slot, err = s.waitSlotFree(ctx, conn); err != nil {
		return nil, err
	}
	if sl := p.slot; sl != nil {
		switch {
		case sl.plugin != "pgoutput":
			add("source.postgres.slot: slot %q uses plugin %q, ragsync needs pgoutput: choose another slot name", s.cfg.Slot, sl.plugin)
		case sl.database != s.db:
			add("source.postgres.slot: slot %q belongs to database %q, not %q: choose another slot name", s.cfg.Slot, sl.database, s.db)
		case sl.walStatus == "lost":
			err := &SourceError{msg: fmt.Sprintf("source.postgres.slot: slot %q was invalidated (the WAL it needed is gone): run `ragsync slot drop --config <file>` and start serve again, which recreates the slot and loads the tables again; raise max_slot_wal_keep_size so it does not happen again", s.cfg.Slot)}
			s.health.set(err.Error())
			return nil, err
		case !p.pubExists:
			// pgoutput reads the publication as of each change's
			// position: one created now is unknown at the slot's.
			return nil, &SourceError{msg: fmt.Sprintf("source.postgres.publication: publication %q is gone but slot %q still exists, and the slot cannot decode without it (Postgres reads the publication as of each change's position, so recreating it does not help): run `ragsync slot drop --config <file>` (add --force if ragsync did not create the slot), then start serve again, which creates both and loads the tables again", s.cfg.Publication, s.cfg.Slot)}
		}
	} else if p.freeSlots <= 0 {
		add("source database: every replication slot is taken (max_replication_slots): drop one that is unused (SELECT slot_name, active FROM pg_replication_slots) or raise max_replication_slots and restart Postgres")
	}

	// The tables: those the publication holds, or those tables[] names.
	var published [][2]string
	if p.pubExists {
		rows, err := conn.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY schemaname, tablename", s.cfg.Publication)
		if err != nil {
			return nil, fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
		}
		for rows.Next() {
			var t [2]string
			if err := rows.Scan(&t[0], &t[1]); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
			}
			published = append(published, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read publication %q: %w", s.cfg.Publication, err)
		}
	}
	var literal [][2]string
	for _, tc := range s.cfg.Tables {
		schema, table, ok, err := literalTable(tc.Match)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			if !p.pubExists {
				add("tables[].match: %q is a pattern, so ragsync cannot create publication %q for it: name the tables exactly, or create the publication yourself (CREATE PUBLICATION %s FOR TABLE …) and set source.postgres.publication", tc.Match, s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize())
			}
			continue
		}
		literal = append(literal, [2]string{schema, table})
	}
	infos, err := readTables(ctx, conn, append(slices.Clone(published), literal...))
	if err != nil {
		return nil, err
	}
	for _, l := range literal {
		if infos[relKey(l[0], l[1])] == nil {
			add("tables[].match: table %s does not exist in database %q: check the name (schema.table, case-sensitive) or remove it from tables[]", pgx.Identifier{l[0], l[1]}.Sanitize(), s.db)
		}
	}
	inPub := map[string]bool{}
	for _, t := range published {
		inPub[relKey(t[0], t[1])] = true
	}
	order := 0
	seen := map[string]bool{}
	consider := func(key string) *tableInfo {
		t := infos[key]
		if t == nil || seen[key] {
			return nil
		}
		seen[key] = true
		t.order = order
		order++
		p.tables = append(p.tables, t)
		return t
	}
	for _, pt := range published {
		consider(relKey(pt[0], pt[1]))
	}
	for _, l := range literal {
		t := consider(relKey(l[0], l[1]))
		if t == nil {
			continue
		}
		switch {
		case !p.pubExists:
			p.createPub = append(p.createPub, t)
		case allTables:
		case p.pubCreated:
			p.addToPub = append(p.addToPub, t)
		default:
			add("source.postgres.publication: %q does not publish table %s, which tables[] lists: run ALTER PUBLICATION %s ADD TABLE %s (ragsync then loads its rows at the next start), or remove it from tables[]",
				s.cfg.Publication, t.sql(), pgx.Identifier{s.cfg.Publication}.Sanitize(), t.sql())
		}
	}
	for _, t := range p.tables {
		_, t.matched = cdc.LookupTable(s.cfg.Tables, t.name)
		if t.matched {
			s.warnMissingColumns(t.schema, t.table, t.name, t.cols)
			t.ids = idColumns(s.cfg.Tables, t.name, t.pk)
			errs = append(errs, s.checkTable(t, p, !inPub[relKey(t.schema, t.table)])...)
		}
	}
	if p.pubExists && len(published) == 0 && len(p.addToPub) == 0 {
		add("source.postgres.publication: %q publishes no table: add the tables (ALTER PUBLICATION %s ADD TABLE schema.table) or choose another publication", s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize())
	}
	if !p.pubExists && len(s.cfg.Tables) == 0 {
		add("source.postgres.publication: %q does not exist and tables[].match names no table: list the tables as schema.table, or create the publication yourself", s.cfg.Publication)
	}
	if len(p.createPub) > 0 && !p.canCreateInDB && !p.superuser {
		add("source database: role %q may not create publication %q (it needs CREATE on database %q): run GRANT CREATE ON DATABASE %s TO %s, or create the publication yourself: CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)",
			p.role, s.cfg.Publication, s.db, pgx.Identifier{s.db}.Sanitize(), pgx.Identifier{p.role}.Sanitize(), pgx.Identifier{s.cfg.Publication}.Sanitize(), sqlNames(p.createPub))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// The identity the slot's loads recorded: another one means the
	// database moved, and its positions say nothing about the stored ones.
	if p.record, err = s.cfg.State.Load(ctx, s.cfg.Slot); err != nil {
		return nil, fmt.Errorf("read initial load state of slot %q: %w", s.cfg.Slot, err)
	}
	if old := p.record.Source; old != "" && old != s.source {
		if !s.cfg.AdoptMove || !s.cfg.InitialLoad {
			return nil, &SourceError{msg: fmt.Sprintf("source.postgres.url: the source moved: slot %q's loads read %s, and the server now answers as %s "+
				"(a dump/restore, pg_upgrade, an upgrade by logical replication, or another server or database): its WAL positions say nothing about the stored documents'. "+
				"If this is the same database on a new server, start once with `ragsync serve --adopt-source` (with source.postgres.initial_load on): it loads every table again and that load replaces the documents the old server wrote; "+
				"if it is another database, give it its own slot (source.postgres.slot) and index", s.cfg.Slot, old, s.source)}
		}
		p.movedFrom = old
	}
	if s.cfg.InitialLoad {
		var names [][2]string
		for _, t := range p.tables {
			if t.matched {
				names = append(names, [2]string{t.schema, t.table})
			}
		}
		filtered, err := cdc.FilteredTables(ctx, conn, names)
		if err != nil {
			return nil, err
		}
		if len(filtered) > 0 {
			return nil, &cdc.ErrFilteredRead{Role: p.role, Tables: filtered,
				Fix: "turn the initial load off (source.postgres.initial_load: false; the stream itself is not filtered) and load with `ragsync backfill --no-reconcile`, which indexes only the rows the role sees"}
		}
	}

	// What the slot has loaded so far.
	if p.slot != nil && s.cfg.InitialLoad {
		// Tables neither loaded nor in an unfinished load: loaded after
		// it (or alone), in this start.
		loaded := map[string]bool{}
		for _, n := range append(slices.Clone(p.record.Loaded), p.record.Pending...) {
			loaded[n] = true
		}
		for _, t := range p.tables {
			// A record without the list predates it: it covered every
			// table then published; only tables added now are new.
			old := p.record.Exists && p.record.Loaded == nil && len(p.record.Pending) == 0 && inPub[relKey(t.schema, t.table)]
			if t.matched && !loaded[t.name] && !old {
				p.toLoad = append(p.toLoad, t.name)
			}
		}
	}
	return p, nil
}

// checkTable reports what keeps a table of tables[] from being read
// correctly, or from being published without changing how the
// application's own statements behave.
func (s *Source) checkTable(t *tableInfo, p *plan, toPublish bool) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	name := t.sql()
	if !t.canSelect {
		add("table %s: role %q cannot read it (the initial load and reloads do): run GRANT SELECT ON %s TO %s", name, p.role, name, pgx.Identifier{p.role}.Sanitize())
	}
	if toPublish && !t.owned && !p.superuser {
		add("table %s: role %q does not own it, so it cannot publish it: run ALTER PUBLICATION %s ADD TABLE %s as its owner (creating the publication first if need be: CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true))",
			name, p.role, pgx.Identifier{s.cfg.Publication}.Sanitize(), name, pgx.Identifier{s.cfg.Publication}.Sanitize(), name)
	}
	if t.kind == "p" && p.pubExists && !p.viaRoot {
		add("table %s is partitioned and publication %q publishes changes under each partition's name, which tables[] does not match: run ALTER PUBLICATION %s SET (publish_via_partition_root = true)",
			name, s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize())
	}
	switch {
	case t.ident == "n", t.ident == "d" && len(t.pk) == 0 && t.kind != "p":
		// Published without a replica identity, the table would refuse
		// the application's UPDATE and DELETE statements outright.
		ident := map[string]string{"n": "NOTHING", "d": "DEFAULT"}[t.ident]
		if len(t.ids) == 0 {
			// Both fixes in one message: the id check below would
			// otherwise only speak once the first fix is made.
			add("table %s has no primary key, and ragsync needs two things it would give: a replica identity (REPLICA IDENTITY %s carries none, so once published Postgres would refuse the application's UPDATE and DELETE on it): run ALTER TABLE %s REPLICA IDENTITY FULL; and the columns that identify a document: set tables[].id for %s (e.g. id: [id]). Or add a primary key, which does both",
				name, ident, name, t.name)
			return errs
		}
		add("table %s has no replica identity (no primary key, REPLICA IDENTITY %s), so once published Postgres would refuse the application's UPDATE and DELETE on it: run ALTER TABLE %s REPLICA IDENTITY FULL, or add a primary key",
			name, ident, name)
		return errs
	}
	for _, leaf := range t.badLeaves {
		add("partition %s of %s has no replica identity, so once published Postgres would refuse the application's UPDATE and DELETE on it: run ALTER TABLE %s REPLICA IDENTITY FULL, or give %s a primary key", leaf, name, leaf, name)
	}
	if len(t.ids) == 0 {
		add("table %s has no primary key, so ragsync cannot tell its documents apart: set tables[].id to the columns that identify a row (e.g. id: [id]) for %s", name, t.name)
		return errs
	}
	for _, c := range t.ids {
		if !slices.Contains(t.cols, c) {
			add("tables[].id: table %s has no column %q: set tables[].id for %s to existing columns, or leave it out to use the primary key", name, c, t.name)
			return errs
		}
	}
	// Deletes and key changes carry only the replica identity's columns:
	// they must hold the document id, or the old document cannot be found.
	var carried []string
	switch t.ident {
	case "f":
		carried = t.cols
	case "i":
		carried = t.identCols
	default:
		carried = t.pk
	}
	var missing []string
	for _, c := range t.ids {
		if !slices.Contains(carried, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		what := map[string]string{"d": "REPLICA IDENTITY DEFAULT (the primary key: " + strings.Join(t.pk, ", ") + ")", "i": "REPLICA IDENTITY USING INDEX (columns " + strings.Join(t.identCols, ", ") + ")"}[t.ident]
		add("table %s: its %s does not carry the document id column(s) %s, so deletes and key changes could not find their document: run ALTER TABLE %s REPLICA IDENTITY FULL, or set tables[].id for %s to columns the replica identity holds",
			name, what, strings.Join(missing, ", "), name, t.name)
	}
	return errs
}

func sqlNames(ts []*tableInfo) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.sql()
	}
	return strings.Join(names, ", ")
}

// readTables reads the catalog rows of the tables named, by relKey. Tables
// that do not exist are absent.
func readTables(ctx context.Context, conn *pgx.Conn, names [][2]string) (map[string]*tableInfo, error) {
	out := map[string]*tableInfo{}
	if len(names) == 0 {
		return out, nil
	}
	schemas, tables := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		schemas[i], tables[i] = n[0], n[1]
	}
	rows, err := conn.Query(ctx, `
SELECT n.nspname, c.relname, c.oid, c.relkind::text, c.relreplident::text,
       has_table_privilege(c.oid, 'SELECT'), pg_has_role(c.relowner, 'USAGE'),
       coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
       coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid AND i.indisreplident), '{}'),
       coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
       coalesce((SELECT array_agg(format('%I.%I', ln.nspname, l.relname)) FROM pg_partition_tree(c.oid) pt
                 JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
                 WHERE pt.isleaf AND l.oid <> c.oid AND (l.relreplident = 'n' OR (l.relreplident = 'd'
                   AND NOT EXISTS (SELECT 1 FROM pg_index li WHERE li.indrelid = l.oid AND li.indisprimary)))), '{}')
FROM unnest($1::text[], $2::text[]) AS w(s, t)
JOIN pg_namespace n ON n.nspname = w.s
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t AND c.relkind IN ('r', 'p')`, schemas, tables)
	if err != nil {
		return nil, fmt.Errorf("read the tables' catalog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t := &tableInfo{}
		if err := rows.Scan(&t.schema, &t.table, &t.oid, &t.kind, &t.ident, &t.canSelect, &t.owned, &t.pk, &t.identCols, &t.cols, &t.badLeaves); err != nil {
			return nil, fmt.Errorf("read the tables' catalog: %w", err)
		}
		t.name = cdc.TableName(t.schema, t.table)
		out[relKey(t.schema, t.table)] = t
	}
	return out, rows.Err()
}

// createPublication creates the publication for tables. Partitioned tables
// publish under their own name (publish_via_partition_root), as the
// initial load reads them, so a partition's changes reach the parent's
// documents.
func (s *Source) createPublication(ctx context.Context, conn *pgx.Conn, tables []*tableInfo) error {
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pgx.Identifier{s.cfg.Publication}.Sanitize(), sqlNames(tables))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create publication: %s: %w (the role must own the tables; or create it yourself and set source.postgres.publication)", sql, err)
	}
	if err := s.cfg.State.RecordCreated(ctx, KindPublication, s.db, s.cfg.Publication); err != nil {
		_, _ = conn.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{s.cfg.Publication}.Sanitize())
		return fmt.Errorf("record publication %q as created by ragsync: %w", s.cfg.Publication, err)
	}
	s.log.Info("publication created", "publication", s.cfg.Publication, "tables", sqlNames(tables))
	return nil
}

// waitSlotFree returns the slot (nil if absent) once no connection holds
// it. After a crash the old walsender keeps the slot until it notices its
// client is gone, which can take up to wal_sender_timeout, or until a slot
// creation it was waiting in gives up; a new process waits for that rather
// than failing.
func (s *Source) waitSlotFree(ctx context.Context, conn *pgx.Conn) (*slotRow, error) {
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
