package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrVectorUnavailable means the Postgres server has no pgvector extension
// installed, so CREATE EXTENSION vector cannot succeed.
var ErrVectorUnavailable = errors.New("the pgvector extension is not available on this Postgres server: run `make services` or install pgvector (https://github.com/pgvector/pgvector#installation)")

// ErrBadSchema means a schema name is not a plain lower-case identifier.
var ErrBadSchema = errors.New("schema name must match [a-z_][a-z0-9_]{0,62}")

// Interrupted reports whether err means the connection was lost under a
// migration rather than that the migration is wrong: the backend was
// terminated (57P01) or the server is shutting down or starting (57P02,
// 57P03), a connection exception (class 08), or a reset, refused or closed
// connection. Such a run can simply be tried again.
func Interrupted(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		// goose talks through database/sql, which reports a connection the
		// server closed under it as these.
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}

// RetryInterrupted runs fn, a step that is safe to repeat, again while it
// fails only because the server ended its connection (Interrupted: a
// terminated backend, a restart), for up to 2 minutes with backoff, as Up
// does for the migrations. Any other error, or ctx ending,
// returns at once. what names the step in the warning logged per retry;
// logger nil logs nothing.
func RetryInterrupted(ctx context.Context, logger *slog.Logger, what string, fn func() error) error {
	start, wait := time.Now(), 200*time.Millisecond
	for {
		err := fn()
		if err == nil || !Interrupted(err) || time.Since(start) > 2*time.Minute || ctx.Err() != nil {
			return err
		}
		if logger != nil {
			logger.WarnContext(ctx, what+" was interrupted by a lost connection; retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}
