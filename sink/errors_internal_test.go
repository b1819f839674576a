package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestRetryable(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("upsert x: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"lock not available", pg("55P03"), true},
		{"connection failure", pg("08006"), true},
		{"admin shutdown", pg("57P01"), true},
		{"server starting", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"origin gone", fmt.Errorf("chunk 3: %w", ErrOriginGone), true},
		{"origin gone, but cancelled", errors.Join(ErrOriginGone, context.Canceled), false},
		{"deadlock, but cancelled", errors.Join(pg("40P01"), context.Canceled), false},
		{"fatal schema error", fmt.Errorf("x: %w", classify(pg("42P01"), "s")), false},
		{"data error", fmt.Errorf("x: %w", classify(pg("22021"), "s")), false},
		{"unique violation", pg("23505"), false},
		{"undefined table", pg("42P01"), false},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false},
		{"invalid document", fmt.Errorf("upsert x: %w", ErrInvalidDocument), false},
		{"plain", errors.New("boom"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Retryable(tc.err))
		})
	}
}

func TestPermanentErrors(t *testing.T) {
	for _, err := range []error{ErrInvalidDocument, ErrMissingVector, ErrIndexMismatch, ErrInvalidQuery} {
		var p interface{ Permanent() bool }
		require.True(t, errors.As(fmt.Errorf("upsert x: %w", err), &p), err.Error())
		require.True(t, p.Permanent())
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u@h/db?password=secret&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"host=h user=u password=secret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password='se cret' dbname=db", "host=h password=xxxxx dbname=db"},
		{"postgres://u:secret@h:notaport/db", "postgres://u:xxxxx@h:notaport/db"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, redactURL(tc.in))
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Index: "articles", Model: "m", Dimensions: 8}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"index upper case", func(c *Config) { c.Index = "Articles" }, "index:"},
		{"index too long", func(c *Config) { c.Index = "a234567890123456789012345678901234567890xx" }, "index:"},
		{"index with quote", func(c *Config) { c.Index = "a'b" }, "index:"},
		{"no model", func(c *Config) { c.Model = "" }, "embedder.model"},
		{"zero dims", func(c *Config) { c.Dimensions = 0 }, "embedder.dimensions"},
		{"too many dims", func(c *Config) { c.Dimensions = 2001 }, "embedder.dimensions"},
		{"bad schema", func(c *Config) { c.Schema = "x;drop" }, "postgres.schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.withDefaults().validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("all problems at once", func(t *testing.T) {
		err := Config{}.withDefaults().validate()
		require.ErrorContains(t, err, "index:")
		require.ErrorContains(t, err, "embedder.model")
		require.ErrorContains(t, err, "embedder.dimensions")
	})
}
