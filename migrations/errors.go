package migrations

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ragsync/ragsync/internal/fault"
)

// ErrVectorUnavailable means the Postgres server has no pgvector extension
// installed, so CREATE EXTENSION vector cannot succeed.
var ErrVectorUnavailable = errors.New("the pgvector extension is not available on this Postgres server: run `make services` or install pgvector (https://github.com/pgvector/pgvector#installation)")

// ErrBadSchema means a schema name is not a plain lower-case identifier.
var ErrBadSchema = errors.New("schema name must match [a-z_][a-z0-9_]{0,62}")

// RetryInterrupted runs fn, a step that is safe to repeat, again while it
// fails only because the server ended its connection (fault.Lost: a
// terminated backend, a restart), for up to 2 minutes with backoff, as Up
// does for the migrations. Any other error, or ctx ending,
// returns at once. what names the step in the warning logged per retry;
// logger nil logs nothing.
func RetryInterrupted(ctx context.Context, logger *slog.Logger, what string, fn func() error) error {
	start, wait := time.Now(), 200*time.Millisecond
	for {
		err := fn()
		if err == nil || !fault.Lost(err) || time.Since(start) > 2*time.Minute || ctx.Err() != nil {
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
