package migrations

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what EnsureVector needs: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports whether schema is a name ragsync accepts: a plain
// lower-case identifier, so it never needs quoting inside goose's table name.
func ValidSchema(schema string) error {
	if !schemaRE.MatchString(schema) {
		return fmt.Errorf("schema %q: %w", schema, ErrBadSchema)
	}
	return nil
}

// EnsureVector creates the vector extension in schema public unless it
// exists. It is safe to call from several processes at once.
func EnsureVector(ctx context.Context, q Querier) error {
	return ensureExtension(ctx, q, "vector")
}

// ensureExtension is EnsureVector for any extension name, so a test can
// provoke the not-installed error on a real server.
func ensureExtension(ctx context.Context, q Querier, name string) error {
	ident := pgx.Identifier{name}.Sanitize()
	for attempt := 0; ; attempt++ {
		var exists bool
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = $1)`, name).Scan(&exists)
		if err != nil {
			return fmt.Errorf("check extension %s: %w", name, err)
		}
		if exists {
			return nil
		}
		// Checked first so that a role without CREATE privilege works once
		// an administrator has created the extension.
		_, err = q.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+ident+" WITH SCHEMA public")
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "23505", "42710":
				// Another session created it between our check and our
				// CREATE (pg_extension's unique index); look again.
				if attempt == 0 {
					continue
				}
			case "0A000", "58P01":
				// 0A000 "extension is not available" (PG ≥ 16),
				// 58P01 "could not open extension control file" (PG ≤ 15).
				return fmt.Errorf("create extension %s: %w (%s)", name, ErrVectorUnavailable, pgErr.Message)
			}
		}
		return fmt.Errorf("create extension %s: %w", name, err)
	}
}
