package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
)

// Delete soft-deletes the document table/key at version v, fenced like
// Upsert: a newer stored version makes it Stale, the same version already
// deleted a Duplicate. The row stays with deleted_at set and version v, so
// an older create arriving later is fenced out; a delete of a document the
// index never saw inserts such a row for the same reason. The chunks stay
// (a later, newer Upsert undeletes and reuses them) but Search and
// SearchText never return them. Outcome counts are always zero.
func (s *Store) Delete(ctx context.Context, table, key string, v cdc.Version, ts time.Time) (Outcome, error) {
	id := DocID(table, key)
	if table == "" || key == "" || v.IsZero() {
		return Outcome{}, fmt.Errorf("delete %s: %w: table, key and version are required", id, ErrInvalidDocument)
	}
	var out Outcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.delete(ctx, tx, id, table, key, v, ts)
		return err
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("delete %s: %w", id, classify(err, s.cfg.Schema))
	}
	return out, nil
}

func (s *Store) delete(ctx context.Context, tx pgx.Tx, id, table, key string, v cdc.Version, ts time.Time) (Outcome, error) {
	st, err := s.lockDoc(ctx, tx, id)
	if err != nil {
		return Outcome{}, err
	}
	if !st.found {
		// A truncate at or after v already removed this document; a
		// tombstone at v would sit below the truncate's fence and let a
		// create between v and the truncate through.
		fenced, err := s.truncated(ctx, tx, table, v)
		if err != nil || fenced {
			return Outcome{Stale: fenced}, err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO "+s.tDocs+
			" (index_name, id, source_table, doc_key, version, source_ts, deleted_at)"+
			" VALUES ($1, $2, $3, $4, $5, $6, now()) ON CONFLICT (index_name, id) DO NOTHING",
			s.cfg.Index, id, table, key, v.String(), nullTime(ts))
		if err != nil {
			return Outcome{}, fmt.Errorf("insert tombstone: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return Outcome{Applied: true}, nil
		}
		// Created concurrently: fence against the winner's row.
		if st, err = s.lockDoc(ctx, tx, id); err != nil {
			return Outcome{}, err
		}
		if !st.found {
			return Outcome{}, errors.New("document row vanished under a concurrent writer")
		}
	}
	switch c := v.Compare(st.version); {
	case c < 0:
		return Outcome{Stale: true}, nil
	case c == 0 && st.deleted:
		return Outcome{Duplicate: true}, nil
	}
	// A newer delete of a deleted document still raises the fence; the
	// first deleted_at is kept.
	_, err = tx.Exec(ctx, "UPDATE "+s.tDocs+
		" SET version = $3, source_ts = $4, deleted_at = coalesce(deleted_at, now()), updated_at = now()"+
		" WHERE index_name = $1 AND id = $2",
		s.cfg.Index, id, v.String(), nullTime(ts))
	if err != nil {
		return Outcome{}, fmt.Errorf("mark deleted: %w", err)
	}
	return Outcome{Applied: true}, nil
}

// Truncate applies a truncate of source table at version v: every document
// of that table whose stored version is ≤ v is soft-deleted and takes v as
// its version (documents changed after the truncate, at a higher version,
// stay). It also records v as the table's fence, so a create older than the
// truncate for a document the index has not seen is Stale, not applied. It
// returns how many live documents it deleted. Versions compare as the C
// collation orders cdc.Version.String(), which equals Version.Compare.
func (s *Store) Truncate(ctx context.Context, table string, v cdc.Version, ts time.Time) (int, error) {
	if table == "" || v.IsZero() {
		return 0, fmt.Errorf("truncate %s: %w: table and version are required", table, ErrInvalidDocument)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+s.tTruncs+" AS t (index_name, source_table, version)"+
			" VALUES ($1, $2, $3) ON CONFLICT (index_name, source_table) DO UPDATE"+
			" SET version = greatest(t.version, excluded.version), truncated_at = now()",
			s.cfg.Index, table, v.String())
		if err != nil {
			return fmt.Errorf("record fence: %w", hintMigrate(err, s.cfg.Schema))
		}
		tag, err := tx.Exec(ctx, "UPDATE "+s.tDocs+
			" SET version = $3, source_ts = coalesce($4, source_ts), deleted_at = now(), updated_at = now()"+
			" WHERE index_name = $1 AND source_table = $2 AND version <= $3 AND deleted_at IS NULL",
			s.cfg.Index, table, v.String(), nullTime(ts))
		if err != nil {
			return fmt.Errorf("mark deleted: %w", err)
		}
		n = int(tag.RowsAffected())
		// Already deleted rows take v too, so their fence is the truncate's.
		_, err = tx.Exec(ctx, "UPDATE "+s.tDocs+" SET version = $3, updated_at = now()"+
			" WHERE index_name = $1 AND source_table = $2 AND version < $3 AND deleted_at IS NOT NULL",
			s.cfg.Index, table, v.String())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("truncate %s: %w", table, classify(err, s.cfg.Schema))
	}
	return n, nil
}
