package sink

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Unvacuumed is one of ragsync's tables that autovacuum does not look after.
type Unvacuumed struct {
	Table string // schema-qualified
	// Fix says what to change: the table's own storage parameter wins,
	// because turning autovacuum on for the server would not cover it.
	Fix string
	// HNSW says the table has an HNSW index, whose dead entries pile up
	// with the table's dead tuples.
	HNSW bool
}

// Unvacuumed lists ragsync's tables that autovacuum skips: all of them when
// the server runs with autovacuum = off, and any whose storage parameter
// autovacuum_enabled is false. Every replaced or deleted chunk leaves a dead
// tuple in the table and an entry in its HNSW index, and the planner works
// from the statistics autovacuum's ANALYZE keeps fresh, so serve warns about
// each.
func (s *Store) Unvacuumed(ctx context.Context) ([]Unvacuumed, error) {
	// The option's value goes through Postgres's own boolean cast, which
	// accepts every spelling ALTER TABLE does (off, false, 0, no, …).
	rows, err := s.pool.Query(ctx, "SELECT n.nspname || '.' || c.relname,"+
		" coalesce((SELECT NOT o.option_value::bool FROM pg_options_to_table(c.reloptions) o"+
		" WHERE o.option_name = 'autovacuum_enabled'), false),"+
		" current_setting('autovacuum')::bool,"+
		" EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am a ON a.oid = ic.relam"+
		" WHERE i.indrelid = c.oid AND a.amname = 'hnsw')"+
		" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"+
		" WHERE n.nspname = $1 AND c.relname IN ('documents', 'chunks', 'embedding_cache') AND c.relkind = 'r'"+
		" ORDER BY c.relname", s.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("check autovacuum: %w", err)
	}
	type table struct {
		name               string
		tableOff, serverOn bool
		hnsw               bool
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.name, &t.tableOff, &t.serverOn, &t.hnsw)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("check autovacuum: %w", err)
	}
	var out []Unvacuumed
	for _, t := range tables {
		switch {
		case t.tableOff:
			out = append(out, Unvacuumed{Table: t.name, Fix: "ALTER TABLE " + t.name + " RESET (autovacuum_enabled)", HNSW: t.hnsw})
		case !t.serverOn:
			out = append(out, Unvacuumed{Table: t.name, Fix: "ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf()", HNSW: t.hnsw})
		}
	}
	return out, nil
}
