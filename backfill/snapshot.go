package backfill

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc/pgsnap"
)

// snapshot is the REPEATABLE READ transaction every page of one run is read
// in, and the WAL position that dates it.
//
// Why the position is safe without a replication slot: the transaction's
// snapshot is taken by its first statement, and that same statement then
// reads pg_current_wal_insert_lsn(), so position P is at or after the end of
// every WAL record inserted before the snapshot, in particular the commit
// record of every transaction the snapshot sees. Hence:
//
//   - every change visible in the snapshot has a change LSN below P - 1
//     (its record ends before its commit record, which ends at or before P);
//   - every change written after a row was read (its heap update happens
//     after our read of the page) has a record starting at or after P.
//
// A row version is therefore P - 1 (see Source.rowVersion), except for rows
// that a transaction not visible in the snapshot had already touched when
// we read them (xmax set): such a transaction may have written its change
// before P and commit after it, the "straddling" transaction, whose streamed
// change LSN is below P although the snapshot does not see it. Those rows
// are re-checked (Source.recheck) instead of trusted.
//
// A temporary replication slot (CREATE_REPLICATION_SLOT … SNAPSHOT 'export')
// would give an exact consistent point too, but it waits for every running
// transaction to end before it exists, needs a replication connection and
// the REPLICATION privilege, and still leaves the straddling transaction to
// handle: the xmax re-check is needed either way, so ragsync does without.
type snapshot struct {
	tx       pgx.Tx
	conn     *pgxpool.Conn
	position uint64   // WAL insert position read inside the snapshot
	name     string   // pg_export_snapshot(), for logs and parallel readers
	tables   []uint32 // oids of the tables to reconcile
	// writers are the transactions that held a write lock on one of
	// tables just after the position was read: every transaction that may
	// have written a row of them before the position and commit after the
	// snapshot is among them (reconcile.go).
	writers []string
}

// begin opens the snapshot transaction on a connection of its own, and
// notes the writers of tables, the oids of those to reconcile.
func begin(ctx context.Context, pool *pgxpool.Pool, tables []uint32) (*snapshot, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect source: %w", err)
	}
	tx, err := pgsnap.Begin(ctx, conn, "")
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	s := &snapshot{tx: tx, conn: conn, tables: tables}
	// One statement: the snapshot is taken as it starts, the position read
	// as it runs, so the position is not before the snapshot.
	var lsn string
	err = tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_export_snapshot()").Scan(&lsn, &s.name)
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("read snapshot position: %w (backfill must read the primary, not a standby)", err)
	}
	if s.position, err = parseLSN(lsn); err != nil {
		s.close(ctx)
		return nil, err
	}
	// On the other connection, after the position was read: a transaction
	// that takes its write lock later writes after the position.
	if len(tables) > 0 {
		if s.writers, err = writers(ctx, pool, tables, nil); err != nil {
			s.close(ctx)
			return nil, err
		}
	}
	return s, nil
}

// writers returns the (virtual) transactions holding a write lock on one
// of tables, only those of among if it is not nil. A transaction holds it
// from its first write to the table until it ends; pg_locks is readable
// by every user.
func writers(ctx context.Context, pool *pgxpool.Pool, tables []uint32, among []string) ([]string, error) {
	var out []string
	err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE locktype = 'relation' AND mode = 'RowExclusiveLock' AND relation = ANY($1::oid[])
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND ($2::text[] IS NULL OR virtualtransaction = ANY($2))`, tables, among).Scan(&out)
	if err != nil {
		return nil, fmt.Errorf("read the tables' writers: %w", err)
	}
	return out, nil
}

func (s *snapshot) close(ctx context.Context) {
	_ = s.tx.Rollback(ctx)
	s.conn.Release()
}

// parseLSN reads Postgres' "X/Y" pg_lsn text.
func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// formatLSN is parseLSN's inverse.
func formatLSN(n uint64) string { return fmt.Sprintf("%X/%X", uint32(n>>32), uint32(n)) }
