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
	if err := s.writable(); err != nil {
		return Outcome{}, fmt.Errorf("delete %s: %w", id, err)
	}
	if table == "" || key == "" || v.IsZero() || badTable(table) {
		return Outcome{}, fmt.Errorf("delete %s: %w: table (a cdc.TableName, no \"/\"), key and version are required", id, ErrInvalidDocument)
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
	case c < 0 && v.Regressed(st.version):
		return Outcome{}, &cdc.RegressedError{ID: id, Change: v, Stored: st.version}
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
// returns how many live documents it deleted.
//
// Versions are compared in Go with cdc.Version.Compare: across kinds the
// order goes by commit time, which the stored text does not sort by. The
// table's document rows are locked (as the former single UPDATE did) and
// read once, a page at a time.
func (s *Store) Truncate(ctx context.Context, table string, v cdc.Version, ts time.Time) (int, error) {
	if err := s.writable(); err != nil {
		return 0, fmt.Errorf("truncate %s: %w", table, err)
	}
	if table == "" || v.IsZero() {
		return 0, fmt.Errorf("truncate %s: %w: table and version are required", table, ErrInvalidDocument)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.raiseFence(ctx, tx, table, v); err != nil {
			return err
		}
		// Pages in id order, each locked and applied before the next is
		// read, so memory stays at one page however large the table is.
		// Locking page by page is as safe as locking all rows at once: the
		// fence raised above already holds back older creates, and a row a
		// later page meets is compared with v like any other.
		var after string
		for {
			page, err := s.truncatePage(ctx, tx, table, after, v, ts)
			if err != nil {
				return err
			}
			n += page.deleted
			if page.read < s.truncateRows() {
				return nil
			}
			after = page.last
		}
	})
	if err != nil {
		return 0, fmt.Errorf("truncate %s: %w", table, classify(err, s.cfg.Schema))
	}
	return n, nil
}

// raiseFence records v as table's truncate fence unless a later truncate's
// fence is there already.
func (s *Store) raiseFence(ctx context.Context, tx pgx.Tx, table string, v cdc.Version) error {
	// Insert-or-lock first, so two truncates of a table never seen before
	// serialize on the row instead of both inserting.
	_, err := tx.Exec(ctx, "INSERT INTO "+s.tTruncs+" (index_name, source_table, version)"+
		" VALUES ($1, $2, $3) ON CONFLICT (index_name, source_table) DO NOTHING",
		s.cfg.Index, table, v.String())
	if err != nil {
		return fmt.Errorf("record fence: %w", hintMigrate(err, s.cfg.Schema))
	}
	var text string
	if err := tx.QueryRow(ctx, "SELECT version FROM "+s.tTruncs+
		" WHERE index_name = $1 AND source_table = $2 FOR UPDATE", s.cfg.Index, table).Scan(&text); err != nil {
		return fmt.Errorf("record fence: %w", err)
	}
	fv, err := cdc.ParseVersion(text)
	if err != nil {
		return fmt.Errorf("stored truncate version: %w", err)
	}
	if fv.Compare(v) >= 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "UPDATE "+s.tTruncs+" SET version = $3, truncated_at = now()"+
		" WHERE index_name = $1 AND source_table = $2", s.cfg.Index, table, v.String()); err != nil {
		return fmt.Errorf("record fence: %w", err)
	}
	return nil
}

// truncatePageRows is how many document rows Truncate reads, locks and
// updates at a time, unless a test set Store.truncatePageRows.
const truncatePageRows = 2000

// truncatedPage is what one page of Truncate read and did.
type truncatedPage struct {
	read, deleted int
	last          string
}

// truncatePage applies the truncate at v to the page of table's documents
// whose ids follow after (from the first when after is empty).
func (s *Store) truncatePage(ctx context.Context, tx pgx.Tx, table, after string, v cdc.Version, ts time.Time) (truncatedPage, error) {
	var page truncatedPage
	rows, err := tx.Query(ctx, "SELECT id, version, source_ts, deleted_at IS NOT NULL FROM "+s.tDocs+
		" WHERE index_name = $1 AND source_table = $2 AND id > $3 ORDER BY id LIMIT $4 FOR UPDATE",
		s.cfg.Index, table, after, s.truncateRows())
	if err != nil {
		return page, fmt.Errorf("lock documents: %w", err)
	}
	var live, dead []string
	for rows.Next() {
		var (
			id, text string
			sts      *time.Time
			deleted  bool
		)
		if err := rows.Scan(&id, &text, &sts, &deleted); err != nil {
			rows.Close()
			return page, fmt.Errorf("lock documents: %w", err)
		}
		page.read++
		page.last = id
		sv, err := storedVersion(text, sts)
		if err != nil {
			rows.Close()
			return page, fmt.Errorf("document %s: %w", id, err)
		}
		// A document another source wrote is not this truncate's: the
		// table of another database may still hold its row. A live
		// document at the truncate's own version goes too: a
		// position-less tie is won by the later arrival, the truncate.
		if sv.Foreign(v) {
			continue
		}
		switch c := sv.Compare(v); {
		case !deleted && c <= 0:
			live = append(live, id)
		case deleted && c < 0:
			// Already deleted rows take v too, so their fence is the
			// truncate's.
			dead = append(dead, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("lock documents: %w", err)
	}
	if len(live) > 0 {
		tag, err := tx.Exec(ctx, "UPDATE "+s.tDocs+
			" SET version = $3, source_ts = coalesce($4, source_ts), deleted_at = now(), updated_at = now()"+
			" WHERE index_name = $1 AND id = ANY($2)",
			s.cfg.Index, live, v.String(), nullTime(ts))
		if err != nil {
			return page, fmt.Errorf("mark deleted: %w", err)
		}
		page.deleted = int(tag.RowsAffected())
	}
	if len(dead) > 0 {
		if _, err := tx.Exec(ctx, "UPDATE "+s.tDocs+" SET version = $3, updated_at = now()"+
			" WHERE index_name = $1 AND id = ANY($2)", s.cfg.Index, dead, v.String()); err != nil {
			return page, fmt.Errorf("raise tombstones: %w", err)
		}
	}
	return page, nil
}

func (s *Store) truncateRows() int {
	if s.truncatePageRows > 0 {
		return s.truncatePageRows
	}
	return truncatePageRows
}
