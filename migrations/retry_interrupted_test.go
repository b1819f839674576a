package migrations_test

import (
	"context"
	"errors"
	"testing"

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
