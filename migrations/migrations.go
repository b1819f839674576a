package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/ragsync/ragsync/internal/fault"
)

// FS holds the goose SQL migrations, applied in file-name order.
//
//go:embed *.sql
var FS embed.FS

// versionTable is goose's bookkeeping table, kept inside the target schema so
// that each schema migrates on its own.
const versionTable = "goose_db_version"

// Up creates schema if absent, makes sure the vector extension exists in
// public, and applies every pending migration to schema. Several processes
// may call Up at once: a Postgres advisory lock keyed by the schema name makes
// them take turns, and the later ones find nothing to do. Up does not change
// pool's settings; it runs the migrations over a short-lived copy of pool's
// configuration whose search_path is "schema, public". A nil logger discards.
//
// Every migration file runs in its own transaction (none is marked NO
// TRANSACTION, which TestMigrationsAreTransactional checks), so a run that
// loses its connection leaves no partial migration behind: the interrupted
// file rolls back and the next attempt starts at it. Such a run is tried
// again with a doubling wait capped at upMaxWait, for as long as the server
// keeps answering: a backend terminated under a migration, however often,
// never exhausts the retries, so Up completes once the terminations stop,
// however long one migration takes on a loaded machine. Only a server that
// cannot be reached at all for upRetryFor ends the retries.
func Up(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	_, err := Apply(ctx, pool, schema, logger)
	return err
}

// Apply is Up, returning how many migrations it applied, so a command can
// tell "applied" from "nothing to do".
func Apply(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (int, error) {
	return apply(ctx, pool, schema, logger, upRetryFor)
}

// apply is Apply giving up once the server has been unreachable for
// retryFor.
func apply(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger, retryFor time.Duration) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var unreachableSince time.Time // zero while the server answers
	wait, total := upRetryWait, 0
	for attempt := 1; ; attempt++ {
		n, err := up(ctx, pool, schema, logger)
		total += n
		switch {
		case n > 0 || reachedServer(err):
			unreachableSince = time.Time{}
		case unreachableSince.IsZero():
			unreachableSince = time.Now()
		}
		if err == nil || !fault.Lost(err) || ctx.Err() != nil ||
			(!unreachableSince.IsZero() && time.Since(unreachableSince) > retryFor) {
			return total, err
		}
		logger.WarnContext(ctx, "migration interrupted by a lost connection; it rolled back, retrying",
			"schema", schema, "attempt", attempt, "applied_so_far", total, "error", err)
		select {
		case <-ctx.Done():
			return total, err
		case <-time.After(wait):
		}
		wait = min(wait*2, upMaxWait)
	}
}

// upRetryFor bounds how long Apply keeps trying a server it cannot reach.
const upRetryFor = 2 * time.Minute

const (
	upRetryWait = 200 * time.Millisecond
	upMaxWait   = 5 * time.Second
)

// reachedServer reports whether err shows the server answered before the
// connection was lost: an error the server sent (a terminated backend says
// so, SQLSTATE 57P01) or a connection lost after it was established, as
// opposed to a connection that could not be made.
func reachedServer(err error) bool {
	if err == nil {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return true
	}
	var connectErr *pgconn.ConnectError
	return !errors.As(err, &connectErr)
}

func up(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (int, error) {
	p, closeFn, err := newProvider(ctx, pool, schema)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	results, err := p.Up(ctx)
	applied := 0
	for _, r := range results {
		if r.Error == nil {
			applied++
			logger.InfoContext(ctx, "migration applied", "schema", schema,
				"version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	if err != nil {
		return applied, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return applied, nil
}

// newProvider prepares schema and returns a goose provider over it plus the
// function that releases the provider's connections.
func newProvider(ctx context.Context, pool *pgxpool.Pool, schema string) (*goose.Provider, func(), error) {
	if err := ValidSchema(schema); err != nil {
		return nil, nil, err
	}
	if err := EnsureVector(ctx, pool); err != nil {
		return nil, nil, err
	}
	if err := createSchema(ctx, pool, schema); err != nil {
		return nil, nil, err
	}

	// A copy of the caller's pool config, so every connection goose uses
	// (its session-lock connection and its transactions) resolves the
	// migrations' unqualified names in schema.
	cfg := pool.Config()
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize() + ", public"
	cfg.MaxConns = 2
	cfg.MinConns = 0
	migPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate schema %s: open pool: %w", schema, err)
	}
	db := stdlib.OpenDBFromPool(migPool)
	closeFn := func() {
		_ = db.Close()
		migPool.Close()
	}

	// One advisory lock per schema: test schemas migrate in parallel, two
	// ragsync processes on the same schema take turns.
	h := fnv.New64a()
	_, _ = h.Write([]byte("ragsync.migrations." + schema))
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(int64(h.Sum64())),
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS,
		goose.WithSessionLocker(locker),
		goose.WithTableName(schema+"."+versionTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return p, func() { _ = p.Close(); closeFn() }, nil
}

func createSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	var pgErr *pgconn.PgError
	// Two sessions racing on IF NOT EXISTS: the loser hits the catalog's
	// unique index; the schema exists either way.
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}
