package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Replica is a test's own corner of the source database for logical
// replication: a schema for its tables and unique slot, publication and
// application names. Everything is dropped when the test ends; other
// tests' slots are never touched.
type Replica struct {
	// Conn is an ordinary connection to the source database, closed at
	// cleanup.
	Conn *pgx.Conn
	// Schema, Slot, Publication and App are unique to the test.
	Schema, Slot, Publication, App string
}

// Replication creates a Replica. It skips under -short and fails loudly if
// Postgres is unreachable or wal_level is not logical.
func Replication(t testing.TB) *Replica {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: needs Postgres; skipped under -short")
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	r := &Replica{Schema: "repl_" + id, Slot: "ragsync_test_" + id, Publication: "ragsync_test_" + id, App: "ragsync-test-" + id}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("pgtest: %v\nPostgres must be reachable at TEST_DATABASE_URL (default %s): run `make services`", err, DefaultURL)
	}
	r.Conn = conn
	var wal string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&wal); err != nil || wal != "logical" {
		conn.Close(ctx)
		t.Fatalf("pgtest: replication tests need wal_level=logical, have %q (%v)", wal, err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+r.Schema); err != nil {
		conn.Close(ctx)
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() { r.drop(t) })
	return r
}

// drop removes the slot (waiting for its consumer to go), the publication
// and the schema.
func (r *Replica) drop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer r.Conn.Close(ctx)
	for {
		var active bool
		err := r.Conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", r.Slot).Scan(&active)
		if err != nil {
			break // gone, or never created
		}
		if !active {
			_, err := r.Conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", r.Slot)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55006" && ctx.Err() == nil {
				// A walsender took the slot between the check and the
				// drop (a closing source's last connection): wait again.
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Errorf("pgtest: drop slot %s: %v", r.Slot, err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Errorf("pgtest: slot %s still active at cleanup", r.Slot)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, sql := range []string{
		"DROP PUBLICATION IF EXISTS " + pgx.Identifier{r.Publication}.Sanitize(),
		"DROP SCHEMA IF EXISTS " + r.Schema + " CASCADE",
	} {
		if _, err := r.Conn.Exec(ctx, sql); err != nil {
			t.Errorf("pgtest: %s: %v", sql, err)
		}
	}
}

// Exec runs sql on the source database and fails the test on error.
func (r *Replica) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := r.Conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}
