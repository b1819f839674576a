package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvector "github.com/pgvector/pgvector-go/pgx"

	"github.com/ragsync/ragsync/internal/fault"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/migrations"
)

// OpenPool connects to the Postgres at url and returns a pool whose sessions
// have search_path "schema, public" and know pgvector's types. It first
// creates the vector extension (in public) over a single plain connection if
// it is missing, because the types can only be registered once it exists.
// The caller closes the pool. Errors name url without its password.
func OpenPool(ctx context.Context, url, schema string) (*pgxpool.Pool, error) {
	safe := redactURL(url)
	if err := migrations.ValidSchema(schema); err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", safe, err)
	}
	if strings.Contains(url, "://") && strings.Contains(redact.Password(url), "@") {
		// pgx splits the user info at the first '@', takes the rest of the
		// password for the host and quotes it in its DNS error: refuse
		// before connecting.
		return nil, fmt.Errorf("open postgres %s: the password contains a raw '@' (check postgres.url: percent-encode it as %%40)", safe)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the password in its parse errors.
		return nil, fmt.Errorf("open postgres %s: %w (check postgres.url)", safe, err)
	}

	if err := ensureVector(ctx, cfg.ConnConfig, safe); err != nil {
		return nil, err
	}

	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize() + ", public"
	cfg.AfterConnect = pgxvector.RegisterTypes
	cfg.ConnConfig.Tracer = connWaitTracer{}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, defaultMaxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", safe, err)
	}
	// The server accepted the extension check's connection, so a lost
	// first pool connection (a terminated backend, a restart under way) is
	// a blip to retry, not a configuration to fix.
	_, err = fault.Retry(ctx, ensureVectorRetryFor, fault.Lost, func() (struct{}, error) { return struct{}{}, pool.Ping(ctx) })
	if err != nil {
		pool.Close()
		return nil, connectError(safe, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// ensureVectorRetryFor bounds how long OpenPool keeps retrying the
// extension check over connections the server ended under it, as
// migrations.Up does for its own.
const ensureVectorRetryFor = 2 * time.Minute

// vectorCheckError is the extension check failing over a connection that
// was made, as opposed to the connection failing.
type vectorCheckError struct{ err error }

func (e vectorCheckError) Error() string { return e.err.Error() }
func (e vectorCheckError) Unwrap() error { return e.err }

// ensureVector creates the vector extension over a plain connection. A
// connection the server ended (a terminated backend, even while it was
// still being set up; a restart under way) is retried with backoff: such a
// blip at start-up must not stop serve. A refused first connection fails at
// once with its fix, since that is a configuration or a server that is down;
// once retrying, a server that is restarting refuses for a while.
func ensureVector(ctx context.Context, cc *pgx.ConnConfig, safe string) error {
	retrying := false
	retryable := func(err error) bool {
		defer func() { retrying = true }()
		var checkErr vectorCheckError
		return fault.SessionEnded(err) || ((retrying || errors.As(err, &checkErr)) && fault.Lost(err))
	}
	_, err := fault.Retry(ctx, ensureVectorRetryFor, retryable, func() (struct{}, error) {
		conn, err := pgx.ConnectConfig(ctx, cc.Copy())
		if err != nil {
			return struct{}{}, err
		}
		defer func() { _ = conn.Close(ctx) }()
		if err := migrations.EnsureVector(ctx, conn); err != nil {
			return struct{}{}, vectorCheckError{err}
		}
		return struct{}{}, nil
	})
	var checkErr vectorCheckError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &checkErr):
		return fmt.Errorf("open postgres %s: %w", safe, checkErr.err)
	default:
		return connectError(safe, cc.Database, err)
	}
}

// connectError says what to fix for a failed connection: the server
// answered and refused (no such database, authentication), or nobody
// answered at all.
func connectError(safe, database string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "3D000": // invalid_catalog_name
			return fmt.Errorf("connect postgres %s: %w (Postgres is running but has no database %q: create it, e.g. createdb %s, or fix postgres.url)", safe, err, database, database)
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			return fmt.Errorf("connect postgres %s: %w (Postgres refused the credentials: fix the user or password in postgres.url)", safe, err)
		}
		return fmt.Errorf("connect postgres %s: %w (fix postgres.url)", safe, err)
	}
	return fmt.Errorf("connect postgres %s: %w (is Postgres running? run `make services` or fix postgres.url)", safe, err)
}

// redactURL hides the password of a URL or keyword/value connection string.
func redactURL(s string) string { return redact.String(s) }

// hintMigrate adds the fix to "relation/schema does not exist", which means
// the schema was never migrated.
func hintMigrate(err error, schema string) error {
	if isCode(err, "42P01") || isCode(err, "3F000") {
		return classify(err, schema)
	}
	return err
}

func isCode(err error, code string) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == code
}
