package sink

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/internal/suggest"
	"github.com/ragsync/ragsync/migrations"
)

// UnknownIndexError is what Lookup returns for a name that is neither an
// alias nor an index: it lists the known names and the nearest one. It
// matches ErrNoIndex with errors.Is.
type UnknownIndexError struct {
	Name, Schema string
	// Known are the schema's aliases and indexes, by name.
	Known []string
	// Nearest is the known name within a typo's distance of Name, if any.
	Nearest string
}

func (e *UnknownIndexError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no index or alias %q in schema %s", e.Name, e.Schema)
	switch {
	case e.Nearest != "":
		fmt.Fprintf(&b, " (did you mean %q? known: %s)", e.Nearest, strings.Join(e.Known, ", "))
	case len(e.Known) > 0:
		fmt.Fprintf(&b, " (known: %s)", strings.Join(e.Known, ", "))
	default:
		b.WriteString(" (it has none yet: ragsync serve or ragsync backfill creates the configured one)")
	}
	b.WriteString("; fix index: or --index")
	return b.String()
}

// Permanent marks the error as one a retry cannot fix.
func (e *UnknownIndexError) Permanent() bool { return true }

// Is makes errors.Is(err, ErrNoIndex) true.
func (e *UnknownIndexError) Is(target error) bool { return target == ErrNoIndex }

// Lookup resolves name as Resolve does, for commands that read an index
// and must never create one: a name that is neither an alias nor an index
// is an *UnknownIndexError. It reads only.
func (c *Catalog) Lookup(ctx context.Context, name string) (Resolved, error) {
	r, found, err := c.Resolve(ctx, name)
	if err != nil {
		return Resolved{}, err
	}
	if found {
		return r, nil
	}
	return Resolved{}, c.unknown(ctx, name)
}

// unknown is the *UnknownIndexError of name, which is neither an alias
// nor an index: it lists the known names and the nearest.
func (c *Catalog) unknown(ctx context.Context, name string) error {
	known, err := c.names(ctx)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", name, err)
	}
	return &UnknownIndexError{Name: name, Schema: c.schema, Known: known, Nearest: suggest.Nearest(name, known)}
}

// names lists the aliases and indexes, sorted, without repeats.
func (c *Catalog) names(ctx context.Context) ([]string, error) {
	rows, err := c.pool.Query(ctx, "SELECT name FROM "+c.tIndexes+" UNION SELECT name FROM "+c.tAliases+" ORDER BY 1")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CheckMigrated reports, reading only, whether the schema exists and is
// migrated to the version this build needs: read-only commands call it
// instead of migrating, so that they create nothing.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	want, err := latestMigration()
	if err != nil {
		return err
	}
	var have *int64
	var exists bool
	err = pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "goose_db_version"}.Sanitize()).Scan(&exists)
	if err == nil && exists {
		err = pool.QueryRow(ctx, "SELECT max(version_id) FROM "+pgx.Identifier{schema, "goose_db_version"}.Sanitize()+" WHERE is_applied").Scan(&have)
	}
	switch {
	case err != nil:
		return fmt.Errorf("read the schema version of %s: %w", schema, err)
	case !exists || have == nil:
		return &notMigratedError{schema}
	case *have < want:
		return fmt.Errorf("schema %s is at migration %d, this ragsync needs %d: run ragsync migrate (or ragsync serve, which migrates)", schema, *have, want)
	}
	return nil
}

func latestMigration() (int64, error) {
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return 0, err
	}
	var vs []int64
	for _, f := range files {
		n, _, _ := strings.Cut(f, "_")
		if v, err := strconv.ParseInt(n, 10, 64); err == nil {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, errors.New("no migrations embedded")
	}
	return slices.Max(vs), nil
}
