package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
)

// SourceLoad is what a replication slot's initial loads covered (see
// pgrepl.LoadRecord, which it stores).
type SourceLoad struct {
	Exists  bool
	Loaded  []string // nil on a row written before the list was kept
	Pending []string
	Table   string
	Key     []string
	Fenced  bool
	// Source and Succeeds: see pgrepl.LoadRecord.
	Source   string
	Succeeds []string
}

// SourceState keeps the Postgres source's load records (source_loads) and
// the slots and publications ragsync created (source_objects) in the index
// schema. Safe for concurrent use.
type SourceState struct{ pool *pgxpool.Pool }

// NewSourceState uses pool, whose search_path is the index schema.
func NewSourceState(pool *pgxpool.Pool) *SourceState { return &SourceState{pool: pool} }

// Load returns slot's record (zero when none). A load recorded unfinished
// before the table list was kept reads as nothing loaded, so it starts over.
func (s *SourceState) Load(ctx context.Context, slot string) (SourceLoad, error) {
	var r SourceLoad
	var done bool
	var table, source *string
	err := s.pool.QueryRow(ctx, `SELECT done_at IS NOT NULL, loaded_tables, pending_tables, progress_table, progress_key, fenced, source_id, succeeds
FROM source_loads WHERE slot = $1`, slot).Scan(&done, &r.Loaded, &r.Pending, &table, &r.Key, &r.Fenced, &source, &r.Succeeds)
	if errors.Is(err, pgx.ErrNoRows) {
		return SourceLoad{}, nil
	}
	if err != nil {
		return SourceLoad{}, fmt.Errorf("read the load state of slot %q: %w", slot, err)
	}
	r.Exists = true
	if table != nil {
		r.Table = *table
	}
	if source != nil {
		r.Source = *source
	}
	if len(r.Succeeds) == 0 {
		r.Succeeds = nil
	}
	if !done && r.Pending == nil && r.Loaded == nil {
		r.Loaded, r.Table, r.Key = []string{}, "", nil
	}
	return r, nil
}

// SaveLoad records slot's load; it is done when nothing is pending.
func (s *SourceState) SaveLoad(ctx context.Context, slot string, r SourceLoad) error {
	loaded := r.Loaded
	if loaded == nil {
		loaded = []string{}
	}
	var table *string
	if r.Table != "" {
		table = &r.Table
	}
	var source *string
	if r.Source != "" {
		source = &r.Source
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO source_loads (slot, done_at, loaded_tables, pending_tables, progress_table, progress_key, fenced, source_id, succeeds)
VALUES ($1, CASE WHEN cardinality($3::text[]) = 0 THEN now() END, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (slot) DO UPDATE SET done_at = excluded.done_at, loaded_tables = excluded.loaded_tables,
  pending_tables = excluded.pending_tables, progress_table = excluded.progress_table,
  progress_key = excluded.progress_key, fenced = excluded.fenced, source_id = excluded.source_id,
  succeeds = excluded.succeeds`, slot, loaded, nonNil(r.Pending), table, r.Key, r.Fenced, source, nonNil(r.Succeeds))
	if err != nil {
		return fmt.Errorf("record the load state of slot %q: %w", slot, err)
	}
	return nil
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// ForgetLoad deletes slot's record.
func (s *SourceState) ForgetLoad(ctx context.Context, slot string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM source_loads WHERE slot = $1", slot); err != nil {
		return fmt.Errorf("forget the load state of slot %q: %w", slot, err)
	}
	return nil
}

// Created reports whether ragsync recorded creating the object.
func (s *SourceState) Created(ctx context.Context, kind, database, name string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM source_objects WHERE kind = $1 AND database = $2 AND name = $3)", kind, database, name).Scan(&ok)
	return ok, err
}

// RecordCreated records that ragsync created the object.
func (s *SourceState) RecordCreated(ctx context.Context, kind, database, name string) error {
	_, err := s.pool.Exec(ctx, "INSERT INTO source_objects (kind, database, name) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", kind, database, name)
	return err
}

// ForgetCreated forgets the record.
func (s *SourceState) ForgetCreated(ctx context.Context, kind, database, name string) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM source_objects WHERE kind = $1 AND database = $2 AND name = $3", kind, database, name)
	return err
}

// RecordStream records that slot, in the source database, streams
// publication.
func (s *SourceState) RecordStream(ctx context.Context, database, slot, publication string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO source_streams (database, slot, publication) VALUES ($1, $2, $3)
ON CONFLICT (database, slot) DO UPDATE SET publication = excluded.publication, updated_at = now()`, database, slot, publication)
	return err
}

// ForgetStream forgets slot's record.
func (s *SourceState) ForgetStream(ctx context.Context, database, slot string) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM source_streams WHERE database = $1 AND slot = $2", database, slot)
	return err
}

// SourceStream is a record of RecordStream.
type SourceStream struct{ Slot, Publication string }

// Streams returns every slot of database recorded with its publication, in
// this schema and in every other ragsync schema of the index database
// whose records the role may read: two deployments may share a source
// database while each keeps its records in its own schema.
func (s *SourceState) Streams(ctx context.Context, database string) ([]SourceStream, error) {
	rows, err := s.pool.Query(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'source_streams' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT') ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list the schemas that record source streams: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the schemas that record source streams: %w", err)
	}
	var out []SourceStream
	for _, schema := range schemas {
		rows, err := s.pool.Query(ctx, "SELECT slot, publication FROM "+pgx.Identifier{schema, "source_streams"}.Sanitize()+" WHERE database = $1", database)
		if err != nil {
			return nil, fmt.Errorf("read the source streams recorded in schema %s: %w", schema, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SourceStream])
		if err != nil {
			return nil, fmt.Errorf("read the source streams recorded in schema %s: %w", schema, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// LiveVersions calls fn with the key and version of every live (not
// deleted) document of table in the index, streaming rows. A full load of
// the Postgres source, and a backfill of a table read whole, reconcile with
// it (cdc.Outdated): documents older than the load are ones whose rows it
// did not read.
func (s *Store) LiveVersions(ctx context.Context, table string, fn func(key string, v cdc.Version) error) error {
	rows, err := s.pool.Query(ctx, "SELECT doc_key, version FROM "+s.tDocs+
		" WHERE index_name = $1 AND source_table = $2 AND deleted_at IS NULL", s.cfg.Index, table)
	if err != nil {
		return fmt.Errorf("list documents of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, version string
		if err := rows.Scan(&key, &version); err != nil {
			return fmt.Errorf("list documents of %s: %w", table, err)
		}
		v, err := cdc.ParseVersion(version)
		if err != nil {
			return fmt.Errorf("list documents of %s: %w", table, err)
		}
		if err := fn(key, v); err != nil {
			return err
		}
	}
	return rows.Err()
}
