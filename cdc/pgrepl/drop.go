package pgrepl

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Dropped says what Drop removed, under which names, and why it kept the
// publication when it did.
type Dropped struct {
	Slot, Publication bool
	// SlotName and PublicationName are the names Drop resolved (see
	// Config.Slot and Config.Publication).
	SlotName, PublicationName string
	// PublicationKept, when not empty, says why the publication ragsync
	// created was kept, and how to drop it by hand.
	PublicationKept string
}

// Drop drops the replication slot of cfg (`ragsync slot drop`) and, when
// ragsync created it and no other slot streams from it, the publication,
// and forgets the slot's initial loads so a new slot loads the tables
// again. It refuses a slot ragsync did not create (another tool's, or one
// created before ragsync recorded what it creates) unless force, and a
// slot a consumer streams from. It never drops a slot of another database,
// force or not: slot names are cluster-wide, and that slot is another
// deployment's. A publication ragsync did not create is never dropped: the
// application or another subscriber may use it.
func Drop(ctx context.Context, cfg Config, force bool) (Dropped, error) {
	cfg = cfg.withDefaults()
	var out Dropped
	conn, err := connectSQL(ctx, cfg.URL, cfg.ApplicationName)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return out, fmt.Errorf("read source database name: %w", err)
	}
	if cfg, err = resolveNames(ctx, conn, db, cfg); err != nil {
		return out, err
	}
	out.SlotName, out.PublicationName = cfg.Slot, cfg.Publication
	slot, err := readSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return out, err
	}
	if slot != nil && slot.database != db {
		where := fmt.Sprintf("belongs to database %q", slot.database)
		if slot.database == "" {
			where = "is a physical slot (of no database)"
		}
		return out, fmt.Errorf("replication slot %q %s, not to %q, the database of source.postgres.url: ragsync never drops another database's slot, with --force or without (slot names are shared by the whole server, so it is another deployment's or another tool's). If it is this deployment's, point source.postgres.url at database %q and run `ragsync slot drop` again; to drop it by hand, connect to database %q and run SELECT pg_drop_replication_slot('%s')",
			cfg.Slot, where, db, slot.database, slot.database, cfg.Slot)
	}
	if slot != nil && slot.activePID != 0 {
		return out, fmt.Errorf("replication slot %q is in use: stop `ragsync serve` first", cfg.Slot)
	}
	slotOurs, err := cfg.State.Created(ctx, KindSlot, db, cfg.Slot)
	if err != nil {
		return out, fmt.Errorf("read what ragsync created: %w", err)
	}
	pubOurs, err := cfg.State.Created(ctx, KindPublication, db, cfg.Publication)
	if err != nil {
		return out, fmt.Errorf("read what ragsync created: %w", err)
	}
	if slot != nil && !slotOurs && !force {
		return out, fmt.Errorf("replication slot %q in database %q was not created by ragsync (another tool's, or created before ragsync recorded what it creates): leave it, or run `ragsync slot drop --force` to drop it anyway", cfg.Slot, db)
	}
	if slot != nil {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot); err != nil {
			return out, fmt.Errorf("drop replication slot %q: %w", cfg.Slot, err)
		}
		out.Slot = true
	}
	if err := cfg.State.ForgetCreated(ctx, KindSlot, db, cfg.Slot); err != nil {
		return out, fmt.Errorf("forget replication slot %q: %w", cfg.Slot, err)
	}
	if err := cfg.State.ForgetLoad(ctx, cfg.Slot); err != nil {
		return out, fmt.Errorf("forget the initial load of slot %q: %w", cfg.Slot, err)
	}
	if err := cfg.State.ForgetStream(ctx, db, cfg.Slot); err != nil {
		return out, fmt.Errorf("forget what slot %q streams: %w", cfg.Slot, err)
	}
	if pubOurs {
		if out.PublicationKept, err = publicationUsers(ctx, conn, cfg.State, db, cfg.Slot, cfg.Publication); err != nil {
			return out, err
		}
	}
	if pubOurs && out.PublicationKept == "" {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
			return out, fmt.Errorf("drop publication %q: %w", cfg.Publication, err)
		}
		out.Publication = true
		if err := cfg.State.ForgetCreated(ctx, KindPublication, db, cfg.Publication); err != nil {
			return out, fmt.Errorf("forget publication %q: %w", cfg.Publication, err)
		}
	}
	if !out.Slot && !out.Publication && out.PublicationKept == "" {
		return out, fmt.Errorf("replication slot %q does not exist in database %q, and ragsync created no publication %q there: nothing to drop", cfg.Slot, db, cfg.Publication)
	}
	return out, nil
}

// publicationUsers says why publication must stay, or "" when no other
// pgoutput slot of database may stream from it. A slot does not record
// its publication (each START_REPLICATION names it), so for every other
// slot it reads the command of the walsender streaming from it, or, when
// none does, the stream records of every ragsync deployment the state can
// see. A slot neither tells about may use it: the publication stays, since
// dropping it would stop that slot for good (pgoutput reads the
// publication as of each change's position, so recreating it does not
// help).
func publicationUsers(ctx context.Context, conn *pgx.Conn, state State, db, slot, publication string) (string, error) {
	rows, err := conn.Query(ctx, `SELECT s.slot_name, coalesce(s.active_pid, 0), coalesce(a.query, '')
FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
WHERE s.database = $1 AND s.plugin = 'pgoutput' AND s.slot_name <> $2 ORDER BY 1`, db, slot)
	if err != nil {
		return "", fmt.Errorf("read the other replication slots of database %q: %w", db, err)
	}
	type other struct {
		Name  string
		PID   int32
		Query string
	}
	others, err := pgx.CollectRows(rows, pgx.RowToStructByPos[other])
	if err != nil {
		return "", fmt.Errorf("read the other replication slots of database %q: %w", db, err)
	}
	if len(others) == 0 {
		return "", nil
	}
	recs, err := state.Streams(ctx, db)
	if err != nil {
		return "", fmt.Errorf("read which publication each slot streams: %w", err)
	}
	recorded := map[string][]string{}
	for _, r := range recs {
		recorded[r.Slot] = append(recorded[r.Slot], r.Publication)
	}
	var users, unknown []string
	for _, o := range others {
		if o.PID != 0 {
			if pubs, ok := startedPublications(o.Query); ok {
				if containsName(pubs, publication) {
					users = append(users, o.Name)
				}
				continue
			}
		}
		pubs, ok := recorded[o.Name]
		switch {
		case !ok:
			unknown = append(unknown, o.Name)
		case containsName(pubs, publication):
			users = append(users, o.Name)
		}
	}
	drop := fmt.Sprintf("DROP PUBLICATION %s (connected to database %q)", pgx.Identifier{publication}.Sanitize(), db)
	switch {
	case len(users) > 0:
		return fmt.Sprintf("publication %q kept: replication slot(s) %s of database %q stream from it (another ragsync deployment, or another subscriber), and dropping it would stop them for good; once nothing streams from it, drop it by hand: %s",
			publication, strings.Join(users, ", "), db, drop), nil
	case len(unknown) > 0:
		return fmt.Sprintf("publication %q kept: ragsync cannot tell whether replication slot(s) %s of database %q stream from it (no consumer streams from them now, and no ragsync record says which publication they read), and dropping it would stop them for good; if none does, drop it by hand: %s",
			publication, strings.Join(unknown, ", "), db, drop), nil
	}
	return "", nil
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// startedPublications reads the publication_names option of the
// START_REPLICATION command that pg_stat_activity shows for a walsender,
// e.g. START_REPLICATION SLOT "s" LOGICAL 0/0 (proto_version '2',
// publication_names '"a","b"'). The option's value is a list of
// identifiers, each quoted or not (unquoted ones fold to lower case, as
// Postgres's SplitIdentifierString does). ok is false when the command is
// not that (another command, or "<insufficient privilege>").
func startedPublications(query string) (names []string, ok bool) {
	lower := strings.ToLower(query)
	if !strings.Contains(lower, "start_replication") {
		return nil, false
	}
	i := strings.Index(lower, "publication_names")
	if i < 0 {
		return nil, false
	}
	rest := strings.TrimLeft(query[i+len("publication_names"):], `" `)
	if !strings.HasPrefix(rest, "'") {
		return nil, false
	}
	// The string literal, with '' for a quote.
	var lit strings.Builder
	closed := false
	for j := 1; j < len(rest); j++ {
		if rest[j] == '\'' {
			if j+1 < len(rest) && rest[j+1] == '\'' {
				lit.WriteByte('\'')
				j++
				continue
			}
			closed = true
			break
		}
		lit.WriteByte(rest[j])
	}
	if !closed {
		return nil, false
	}
	// The identifier list.
	s := lit.String()
	for {
		s = strings.TrimLeft(s, " ")
		var name strings.Builder
		if strings.HasPrefix(s, `"`) {
			j := 1
			for ; j < len(s); j++ {
				if s[j] == '"' {
					if j+1 < len(s) && s[j+1] == '"' {
						name.WriteByte('"')
						j++
						continue
					}
					break
				}
				name.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, false
			}
			s = s[j+1:]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			name.WriteString(strings.ToLower(strings.TrimSpace(s[:end])))
			s = s[end:]
		}
		names = append(names, name.String())
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return names, true
		}
		if s[0] != ',' {
			return nil, false
		}
		s = s[1:]
	}
}
