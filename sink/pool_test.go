package sink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// TestOpenPoolSurvivesTerminatedBackend: the server ends OpenPool's
// connection while it checks the vector extension (an administrator's
// pg_terminate_backend, a restart under way); OpenPool connects again and
// succeeds instead of stopping serve at start-up. The check is held on a
// lock of pg_extension in a database of the test's own, so no other test
// waits on it, and only this test's backend is terminated.
func TestOpenPoolSurvivesTerminatedBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "ragsync_pool_" + hex.EncodeToString(b[:])
	app := "ragsync_pooltest_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.Path = "/" + db
	locker, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer locker.Close(context.Background())
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()

	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE pg_catalog.pg_extension IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		pool, err := sink.OpenPool(ctx, u.String(), "ragsync")
		if err == nil {
			pool.Close()
		}
		done <- err
	}()
	// Wait until OpenPool's check waits on the lock, then end its backend.
	var terminated bool
	for deadline := time.Now().Add(time.Minute); !terminated; {
		require.True(t, time.Now().Before(deadline), "OpenPool never waited on pg_extension")
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) > 0
			FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&terminated))
		if !terminated {
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done, "a backend terminated during the extension check is retried")
}

// TestOpenPoolRetriesASessionEndedAtStartup: the server ends a connection
// while it is still being set up (pg_terminate_backend can land there, and a
// server starting up or shutting down answers the same way). Whether that is
// the extension check's connection or the pool's first, OpenPool connects
// again instead of stopping serve with "fix postgres.url". A dial that is
// refused still fails at once.
func TestOpenPoolRetriesASessionEndedAtStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  []int
	}{
		{"the extension check's first connection", []int{0}},
		{"the extension check's first two connections", []int{0, 1}},
		{"the pool's first connection", []int{1}},
		{"both first connections", []int{0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p := pgtest.StartEndingProxy(t, tc.end...)
			pool, err := sink.OpenPool(ctx, p.URL, "ragsync")
			require.NoError(t, err, "a session the server ended at start-up is retried")
			defer pool.Close()
			require.GreaterOrEqual(t, p.Seen(), len(tc.end)+2, "the ended connections were made again")
		})
	}

	t.Run("a refused dial fails at once", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		u, err := url.Parse(pgtest.URL())
		require.NoError(t, err)
		u.Host = addr
		began := time.Now()
		_, err = sink.OpenPool(context.Background(), u.String(), "ragsync")
		require.ErrorContains(t, err, "is Postgres running?")
		require.Less(t, time.Since(began), 10*time.Second, "a refused first dial is not retried")
	})
}
