package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
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
	// URL is the source database: URL(), or the test's own database
	// (ReplicationDatabase).
	URL string
	// database is the test's own database, dropped at cleanup ("" when
	// the test shares URL()'s).
	database string
}

// Replication creates a Replica. It skips under -short and fails loudly if
// Postgres is unreachable or wal_level is not logical.
func Replication(t testing.TB) *Replica {
	t.Helper()
	return replication(t, false)
}

// ReplicationDatabase is Replication in a database of the test's own,
// created from template0 and dropped at cleanup: what a test asserts about
// every replication slot of its database does not see other tests' slots.
func ReplicationDatabase(t testing.TB) *Replica {
	t.Helper()
	return replication(t, true)
}

func replication(t testing.TB, ownDB bool) *Replica {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: needs Postgres; skipped under -short")
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	r := &Replica{Schema: "repl_" + id, Slot: "ragsync_test_" + id, Publication: "ragsync_test_" + id, App: "ragsync-test-" + id, URL: URL()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ownDB {
		cfg, err := pgx.ParseConfig(URL())
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		admin, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("pgtest: %v\nPostgres must be reachable at TEST_DATABASE_URL (default %s): run `make services`", err, DefaultURL)
		}
		r.database = "repl_" + id
		_, err = admin.Exec(ctx, "CREATE DATABASE "+r.database+" TEMPLATE template0")
		admin.Close(ctx)
		if err != nil {
			t.Fatalf("pgtest: create database: %v", err)
		}
		if u, err := url.Parse(URL()); err == nil && u.Scheme != "" {
			u.Path = "/" + r.database
			r.URL = u.String()
		} else {
			r.URL = URL() + " dbname=" + r.database
		}
		t.Cleanup(func() { r.dropDatabase(t) })
	}
	conn, err := pgx.Connect(ctx, r.URL)
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

// dropDatabase drops the test's own database, once drop has dropped the
// slot (a database with a logical slot cannot be dropped).
func (r *Replica) dropDatabase(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Errorf("pgtest: drop database %s: %v", r.database, err)
		return
	}
	defer admin.Close(ctx)
	var left []string
	rows, err := admin.Query(ctx, "SELECT slot_name FROM pg_replication_slots WHERE database = $1", r.database)
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(left) > 0 {
		t.Errorf("pgtest: database %s still has replication slots %v (%v): a test must drop every slot it creates", r.database, left, err)
		return
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+r.database+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", r.database, err)
	}
}

// Exec runs sql on the source database and fails the test on error.
func (r *Replica) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := r.Conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}
