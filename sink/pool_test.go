package sink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
