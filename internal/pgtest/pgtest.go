// Package pgtest gives tests a real Postgres: one freshly migrated schema per
// test, dropped when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// DefaultURL is the database tests use unless TEST_DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns TEST_DATABASE_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// poolURL caps each test's pool: many tests run at once on a server other
// engineers share, and max_connections is finite.
func poolURL() string {
	u := URL()
	if strings.Contains(u, "pool_max_conns") {
		return u
	}
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		q := p.Query()
		q.Set("pool_max_conns", "4")
		p.RawQuery = q.Encode()
		return p.String()
	}
	return u + " pool_max_conns=4"
}

// Schema creates a unique schema test_<random>, migrates it with
// migrations.Up and returns a pool from sink.OpenPool whose search_path is
// that schema, then public. The pool is closed and the schema dropped when
// the test ends. It skips under -short and fails the test (naming the fix)
// if Postgres is unreachable.
func Schema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("pgtest: needs Postgres; skipped under -short")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_" + hex.EncodeToString(b[:])

	// Not t.Context: the cleanup below must still run after it is done.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := sink.OpenPool(ctx, poolURL(), schema)
	if err != nil {
		t.Fatalf("pgtest: %v\nPostgres with pgvector must be reachable at TEST_DATABASE_URL (default %s): run `make services`", err, DefaultURL)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := migrations.Up(ctx, pool, schema, logger); err != nil {
		t.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	return pool, schema
}
