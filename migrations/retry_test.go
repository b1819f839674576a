package migrations_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUpRetriesAfterBackendTerminated terminates the backend of a migration
// that waits for the schema's migration lock (SQLSTATE 57P01 on its next
// statement): Up tries again and completes instead of failing serve. Only
// this test's backends are terminated, found by their application_name.
func TestUpRetriesAfterBackendTerminated(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_" + hex.EncodeToString(b[:])
	app := "ragsync_migtest_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	sep := "?"
	if strings.Contains(pgtest.URL(), "?") {
		sep = "&"
	}
	pool, err := sink.OpenPool(ctx, pgtest.URL()+sep+"application_name="+app, schema)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Hold the schema's migration lock so Up sits polling for it.
	h := fnv.New64a()
	_, _ = h.Write([]byte("ragsync.migrations." + schema))
	lockID := int64(h.Sum64())
	_, err = admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID)
	require.NoError(t, err)

	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- migrations.Up(ctx, pool, schema, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE '%pg_try_advisory_lock%'`, app).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 20*time.Millisecond, "Up polls for the lock")
	var killed int
	require.NoError(t, admin.QueryRow(ctx,
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
	require.Positive(t, killed)
	// Let the terminated session notice before the lock frees up.
	require.Eventually(t, func() bool { return len(done) > 0 || strings.Contains(logs.String(), "retrying") }, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, logs.String(), "retrying", "the interrupted run is retried")
	_, err = admin.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockID)
	require.NoError(t, err)

	require.NoError(t, <-done)
	require.Equal(t, allTables, tables(t, pool, schema))
}
