package migrations

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Not pgtest (it imports this package); the same URL and skip rules.
func TestEnsureExtensionNotInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err, "Postgres unreachable: run `make services`")
	t.Cleanup(func() { _ = conn.Close(ctx) })

	err = ensureExtension(ctx, conn, "ragsync_no_such_extension")
	require.ErrorIs(t, err, ErrVectorUnavailable)
	require.ErrorContains(t, err, "make services")
}

func TestValidSchema(t *testing.T) {
	tests := []struct {
		schema string
		ok     bool
	}{
		{"ragsync", true}, {"test_0a1b", true}, {"_x", true},
		{"", false}, {"Ragsync", false}, {"a-b", false}, {"a.b", false}, {"9a", false},
		{"a23456789012345678901234567890123456789012345678901234567890123", true},
		{"a234567890123456789012345678901234567890123456789012345678901234", false},
	}
	for _, tc := range tests {
		err := ValidSchema(tc.schema)
		if tc.ok {
			require.NoError(t, err, tc.schema)
		} else {
			require.ErrorIs(t, err, ErrBadSchema, tc.schema)
		}
	}
}
