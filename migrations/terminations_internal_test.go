package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestMigrationsAreTransactional: every migration file runs in one
// transaction, so a run that loses its connection leaves nothing half-done
// (the retry in Apply relies on it). A file that must run outside a
// transaction has to be written so that re-running it after any statement
// is harmless; add it here with the reason.
func TestMigrationsAreTransactional(t *testing.T) {
	files, err := fs.Glob(FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := FS.ReadFile(f)
		require.NoError(t, err)
		require.NotContains(t, string(b), "+goose NO TRANSACTION", "%s runs outside a transaction: an interrupted run would leave part of it applied", f)
	}
}

// TestApplyCompletesOnceTerminationsStop terminates every backend of a
// migration run over and over, for several times longer than the retry
// bound for an unreachable server, then stops: the run completes with every
// migration applied. Terminations prove the server is up, so they never
// exhaust the retries, however long they last. Only this test's backends
// are terminated, found by their application_name.
func TestApplyCompletesOnceTerminationsStop(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	t.Parallel()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_" + hex.EncodeToString(b[:])
	app := "ragsync_migkill_" + hex.EncodeToString(b[:])

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err, "Postgres unreachable: run `make services`")
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const retryFor = 300 * time.Millisecond
	var terminated atomic.Int64
	stop := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		// Terminate for ten times the retry bound; each round kills
		// whatever the run has open at that instant.
		until := time.Now().Add(10 * retryFor)
		for time.Now().Before(until) {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err == nil {
				terminated.Add(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { close(stop); <-killerDone })

	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	n, err := apply(ctx, pool, schema, logger, retryFor)
	<-killerDone
	require.NoError(t, err, "logs:\n%s", logs.String())
	require.Positive(t, terminated.Load(), "no backend was terminated: is application_name applied?")
	require.Contains(t, logs.String(), "rolled back, retrying", "the terminations interrupted the run")

	files, err := fs.Glob(FS, "*.sql")
	require.NoError(t, err)
	var applied int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(DISTINCT version_id) FROM "+schema+"."+versionTable+" WHERE version_id > 0 AND is_applied").Scan(&applied))
	require.Equal(t, len(files), applied, "every migration applied once")
	// A commit whose reply was lost counts as not applied by that attempt
	// and is found applied by the next, so n may fall short, never over.
	require.LessOrEqual(t, n, len(files), "Apply counts no migration twice")
	t.Logf("%d backends terminated; %d interrupted attempts", terminated.Load(), strings.Count(logs.String(), "rolled back, retrying"))
}
