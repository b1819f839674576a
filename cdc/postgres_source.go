package cdc

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PostgresSource is the source of the versions read from database db of the
// cluster whose pg_control system identifier is sysid: "pg:<sysid>/<db>".
// The system identifier is set when a cluster is initialised (initdb) and
// kept by a physical replica and its promotion, so a failover keeps the
// source while a dump/restore, pg_upgrade's new cluster or an upgrade by
// logical replication starts a new one; LSNs are comparable exactly within
// such a source and database.
func PostgresSource(sysid uint64, db string) string {
	return fmt.Sprintf("pg:%d/%s", sysid, db)
}

// QueryRower runs one query that returns one row: *pgx.Conn, pgx.Tx and
// *pgxpool.Pool all are.
type QueryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadPostgresSource reads the source of the database q is connected to
// (see PostgresSource).
func ReadPostgresSource(ctx context.Context, q QueryRower) (string, error) {
	var sysid int64
	var db string
	err := q.QueryRow(ctx, "SELECT system_identifier, current_database() FROM pg_control_system()").Scan(&sysid, &db)
	if err != nil {
		return "", fmt.Errorf("read the source's system identifier (pg_control_system(); a role that may not call it needs EXECUTE on it): %w", err)
	}
	return PostgresSource(uint64(sysid), db), nil
}

// FilteredTables returns, for each of tables ({schema, table} pairs) that
// the connected role reads through row-level security, a line naming the
// table and its policies. Such a read returns only the rows the policies
// let the role see, so it cannot prove any other row gone: a reconcile
// from it would delete live documents. The role reads a table whole when
// it is a superuser, has BYPASSRLS, or owns the table (directly or through
// an inherited role) and the table does not FORCE ROW LEVEL SECURITY, as
// Postgres decides (check_enable_rls).
func FilteredTables(ctx context.Context, q Querier, tables [][2]string) ([]string, error) {
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t[0], t[1]
	}
	rows, err := q.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname),
  coalesce(string_agg(quote_ident(p.polname), ', ' ORDER BY p.polname), '')
FROM unnest($1::text[], $2::text[]) AS w(s, t)
JOIN pg_namespace n ON n.nspname = w.s
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t
LEFT JOIN pg_policy p ON p.polrelid = c.oid
WHERE c.relrowsecurity
  AND NOT (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user)
  AND NOT (pg_has_role(current_user, c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)
GROUP BY 1 ORDER BY 1`, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("read row-level security of the tables: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var table, policies string
		if err := r.Scan(&table, &policies); err != nil {
			return "", err
		}
		if policies == "" {
			return table + " (row-level security on, no policy: the role reads no row)", nil
		}
		return table + " (policies " + policies + ")", nil
	})
}

// Querier runs a query: *pgx.Conn, pgx.Tx and *pgxpool.Pool all do.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrFilteredRead is the refusal of a reconcile (or a load that
// reconciles) over tables the role reads through row-level security.
type ErrFilteredRead struct {
	Role   string
	Tables []string
	// Fix names the switch that reads without reconciling.
	Fix string
}

func (e *ErrFilteredRead) Error() string {
	return fmt.Sprintf("row-level security filters what role %q reads of %s: a reconcile from a filtered read would delete the documents of every row it cannot see, so it is refused. "+
		"Read with a role that sees every row (ALTER ROLE %s BYPASSRLS, or the tables' owner), or %s",
		e.Role, strings.Join(e.Tables, "; "), e.Role, e.Fix)
}

// Permanent reports that retrying does not help.
func (e *ErrFilteredRead) Permanent() bool { return true }
