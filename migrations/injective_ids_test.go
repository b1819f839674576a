package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/migrations"
)

// TestInjectiveIDsMigration: migration 00003 rewrites the ids of an index
// written with the old ids where the new encoding differs (tables holding
// '%' or '/', MongoDB string ids that read as another type), moves their
// chunks along, and leaves every other id as it was.
func TestInjectiveIDsMigration(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 2)
	require.NoError(t, err)

	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec("INSERT INTO indexes (name, model, dimensions) VALUES ('ix', 'm', 2)")
	docs := []struct{ table, key, version, row string }{
		{"public.articles", "42", "pg:01", `{"id": 42}`},
		{"public.50%off", "1", "pg:01", `{"id": 1}`},
		{"a/b.c/d", "7", "pg:01", `{"id": 7}`},
		{"inventory.orders.archive", "9", "mongo:01.02", `{"_id": 9}`},
		{"inventory.customers", "1234", "mongo:01.02", `{"_id": "1234"}`},                                         // a string _id
		{"inventory.customers", "1235", "mongo:01.02", `{"_id": 1235}`},                                           // a number: unchanged
		{"inventory.customers", "596e275826f08b2730779e1f", "mongo:01.02", `{"_id": "596e275826f08b2730779e1f"}`}, // ObjectId or string: left
		{"inventory.customers", "anne", "mongo:01.02", `{"_id": "anne"}`},
		{"inventory.customers", "true", "mongo:01.02", `{"_id": "true"}`},
	}
	for _, d := range docs {
		exec("INSERT INTO documents (index_name, id, source_table, doc_key, version, row) VALUES ('ix', $1, $2, $3, $4, $5)",
			d.table+"/"+d.key, d.table, d.key, d.version, d.row)
		exec("INSERT INTO chunks (index_name, doc_id, position, content_hash, text, embedding) VALUES ('ix', $1, 0, 'h', 't', '[1,2]')",
			d.table+"/"+d.key)
	}
	exec("INSERT INTO truncations (index_name, source_table, version) VALUES ('ix', 'public.50%off', 'pg:02'), ('ix', 'public.articles', 'pg:02')")

	require.NoError(t, migrations.Up(ctx, pool, schema, nil))

	rows, err := pool.Query(ctx, "SELECT d.id, d.source_table || '|' || d.doc_key, (SELECT count(*) FROM chunks c WHERE c.doc_id = d.id) FROM documents d ORDER BY d.id")
	require.NoError(t, err)
	type got struct {
		ID, TableKey string
		Chunks       int
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[got])
	require.NoError(t, err)
	require.ElementsMatch(t, []got{
		{"public.articles/42", "public.articles|42", 1},
		{"public.50%25off/1", "public.50%25off|1", 1},
		{"a%2Fb.c%2Fd/7", "a%2Fb.c%2Fd|7", 1},
		{"inventory.orders.archive/9", "inventory.orders.archive|9", 1},
		{`inventory.customers/"1234"`, `inventory.customers|"1234"`, 1},
		{"inventory.customers/1235", "inventory.customers|1235", 1},
		{"inventory.customers/596e275826f08b2730779e1f", "inventory.customers|596e275826f08b2730779e1f", 1},
		{"inventory.customers/anne", "inventory.customers|anne", 1},
		{`inventory.customers/"true"`, `inventory.customers|"true"`, 1},
	}, all)
	var orphans int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = c.doc_id)").Scan(&orphans))
	require.Zero(t, orphans)
	tr, err := pool.Query(ctx, "SELECT source_table FROM truncations ORDER BY 1")
	require.NoError(t, err)
	names, err := pgx.CollectRows(tr, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"public.50%25off", "public.articles"}, names)

	// Down and up again keep working on the rewritten data.
	_, err = p.DownTo(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool, schema, nil))
}
