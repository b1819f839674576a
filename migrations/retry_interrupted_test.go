package migrations_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/migrations"
)

func TestRetryInterrupted(t *testing.T) {
	terminated := &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	t.Run("lost connections are retried until the step succeeds", func(t *testing.T) {
		calls := 0
		err := migrations.RetryInterrupted(t.Context(), nil, "step", func() error {
			calls++
			if calls < 3 {
				return terminated
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, calls)
	})
	t.Run("other errors return at once", func(t *testing.T) {
		calls := 0
		denied := &pgconn.PgError{Code: "42501", Message: "permission denied"}
		err := migrations.RetryInterrupted(t.Context(), nil, "step", func() error { calls++; return denied })
		require.ErrorIs(t, err, denied)
		require.Equal(t, 1, calls)
	})
	t.Run("database/sql's lost connections are retried too", func(t *testing.T) {
		calls := 0
		err := migrations.RetryInterrupted(t.Context(), nil, "step", func() error {
			calls++
			if calls < 2 {
				return fmt.Errorf("check if table exists: %w; %w", driver.ErrBadConn, sql.ErrConnDone)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 2, calls)
	})
	t.Run("a server that answered is not a lost connection", func(t *testing.T) {
		// A syntax error is the migration's fault; a deadlock, a lock
		// timeout or too many connections mean the server is there and
		// said no: the step fails with that, it is not retried for minutes.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		for _, code := range []string{"42601", "40P01", "40001", "55P03", "53300"} {
			calls := 0
			answered := &pgconn.PgError{Code: code}
			err := migrations.RetryInterrupted(ctx, nil, "step", func() error { calls++; return answered })
			require.ErrorIs(t, err, answered)
			require.Equal(t, 1, calls, code)
		}
	})
	t.Run("a cancelled context stops the retries", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		err := migrations.RetryInterrupted(ctx, nil, "step", func() error {
			calls++
			cancel()
			return terminated
		})
		require.True(t, errors.Is(err, terminated))
		require.Equal(t, 1, calls)
	})
}
