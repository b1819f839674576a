package pgsnap_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgsnap"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// setup creates the test's schema with table items (a composite key and a
// few typed columns) and returns the schema and a connection with the
// session settings every reader uses.
func setup(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "items"}.Sanitize()+` (
		a int, b text, slug text, ts timestamptz, amount numeric, doc jsonb, PRIMARY KEY (a, b))`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "items"}.Sanitize()+` VALUES
		(1, 'x/y', 's1', '2024-03-05 07:07:08.5+01', 12.50, '{"k": [1, 2.5]}'),
		(1, 'z', 's2', NULL, NULL, NULL),
		(2, 'a', NULL, NULL, 3, NULL),
		(3, 'b', 's4', NULL, 4, NULL),
		(4, 'c', 's5', NULL, 5, NULL)`)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cdc.PostgresSessionParams(cfg.RuntimeParams)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return schema, conn
}

func TestPagesInKeyOrderResumeAfterTheLastKey(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	for _, typed := range []bool{false, true} {
		tb := pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}, IDs: []string{"a", "b"}, RowVersions: true}
		if typed {
			tb.KeyTypes = []string{"integer", "text"}
		}
		tx, err := pgsnap.Begin(ctx, conn, "")
		require.NoError(t, err)
		var keys [][]string
		var docKeys []string
		var after []string
		for {
			rows, err := tb.Page(ctx, tx.Conn().PgConn(), after, 2)
			require.NoError(t, err)
			if len(rows) == 0 {
				break
			}
			require.LessOrEqual(t, len(rows), 2, "a page holds at most limit rows")
			for _, r := range rows {
				keys = append(keys, r.KeyText)
				docKeys = append(docKeys, r.DocKey)
				require.NotEmpty(t, r.XMin, "row versions are read when asked")
				require.Equal(t, "0", r.XMax)
			}
			after = rows[len(rows)-1].KeyText
		}
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, [][]string{{"1", "x/y"}, {"1", "z"}, {"2", "a"}, {"3", "b"}, {"4", "c"}}, keys, "typed %v: key order, every row once", typed)
		require.Equal(t, []string{"1/x%2Fy", "1/z", "2/a", "3/b", "4/c"}, docKeys, "several id columns join with '/', escaped inside values")
	}
}

func TestRowsDecodeOneWay(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	tb := pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}, IDs: []string{"slug"}, Where: "t.a < 3"}
	require.Equal(t, schema+".items", tb.Change())
	rows, err := tb.Page(ctx, conn.PgConn(), nil, 10)
	require.NoError(t, err)
	require.Len(t, rows, 3, "Where filters the rows")
	first := rows[0]
	require.Equal(t, "s1", first.DocKey, "document ids come from IDs, not the paging keys")
	require.Equal(t, map[string]any{"slug": "s1"}, first.Key)
	require.Equal(t, map[string]any{
		"a": json.Number("1"), "b": "x/y", "slug": "s1", "ts": "2024-03-05T06:07:08.5Z", "amount": json.Number("12.50"),
		"doc": map[string]any{"k": []any{json.Number("1"), json.Number("2.5")}},
	}, first.After)
	require.Empty(t, first.XMin, "no row versions unless asked")
	require.Empty(t, rows[2].DocKey, "a null id column: no document")
	require.Nil(t, rows[2].Key)
	require.Equal(t, []string{"2", "a"}, rows[2].KeyText, "it still moves the page on")
	// Each value as cdc.PostgresValue decodes it, the replication
	// stream's own decoding.
	for _, c := range []struct {
		oid  uint32
		text string
		col  string
	}{{1184, "2024-03-05 06:07:08.5+00", "ts"}, {1700, "12.50", "amount"}} {
		require.Equal(t, cdc.PostgresValue(c.oid, c.text), first.After[c.col])
	}
}

func TestPageRefusals(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	_, err := pgsnap.Table{Schema: schema, Name: "items"}.Page(ctx, conn.PgConn(), nil, 10)
	require.ErrorContains(t, err, "no key columns")
	_, err = pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}}.Page(ctx, conn.PgConn(), []string{"1"}, 10)
	require.ErrorContains(t, err, "want 2 key values")
	_, err = pgsnap.Table{Schema: schema, Name: "missing", Keys: []string{"a"}}.Page(ctx, conn.PgConn(), nil, 10)
	require.ErrorContains(t, err, "does not exist", "the server's error comes back")
	_, err = pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a"}, Where: "nonsense >"}.Page(ctx, conn.PgConn(), nil, 10)
	require.Error(t, err)
	// The connection is still usable after a failed read.
	rows, err := pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}}.Page(ctx, conn.PgConn(), []string{"3", "b"}, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
}

func TestCursorReadsATableWithoutKeysWhole(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	tb := pgsnap.Table{Schema: schema, Name: "items", IDs: []string{"a", "b"}}
	tx, err := pgsnap.Begin(ctx, conn, "")
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	cur, err := tb.Open(ctx, tx.Conn().PgConn())
	require.NoError(t, err)
	var got []string
	for {
		rows, err := cur.Next(ctx, 2)
		require.NoError(t, err)
		if len(rows) == 0 {
			break
		}
		for _, r := range rows {
			require.Nil(t, r.KeyText, "no key texts without keys")
			got = append(got, r.DocKey)
		}
	}
	require.NoError(t, cur.Close(ctx))
	require.ElementsMatch(t, []string{"1/x%2Fy", "1/z", "2/a", "3/b", "4/c"}, got)
}

func TestGetReadsOneRowByItsDocumentID(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	tb := pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}, IDs: []string{"a", "b"}}
	// The keys of a change: numbers as json.Number, text as strings.
	row, found, err := tb.Get(ctx, conn.PgConn(), map[string]any{"a": json.Number("1"), "b": "x/y"})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "1/x%2Fy", row.DocKey)
	paged, err := tb.Page(ctx, conn.PgConn(), nil, 1)
	require.NoError(t, err)
	require.Equal(t, paged[0].After, row.After, "one row, one decoding, whichever read it")
	require.Equal(t, paged[0].Key, row.Key)

	_, found, err = tb.Get(ctx, conn.PgConn(), map[string]any{"a": json.Number("9"), "b": "x"})
	require.NoError(t, err)
	require.False(t, found, "a row that is gone")

	_, _, err = tb.Get(ctx, conn.PgConn(), map[string]any{"a": json.Number("1")})
	require.ErrorIs(t, err, pgsnap.ErrKeyColumns, "a key of other columns")
}

// TestBeginImportsAnExportedSnapshot: pages read in a transaction that
// imported another's snapshot see the rows as of that snapshot.
func TestBeginImportsAnExportedSnapshot(t *testing.T) {
	schema, conn := setup(t)
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	exporter, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer exporter.Close(context.Background())
	etx, err := exporter.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer etx.Rollback(ctx) //nolint:errcheck
	var name string
	require.NoError(t, etx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&name))

	other, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer other.Close(context.Background())
	_, err = other.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "items"}.Sanitize()+" VALUES (5, 'd', 's6')")
	require.NoError(t, err)

	tb := pgsnap.Table{Schema: schema, Name: "items", Keys: []string{"a", "b"}, IDs: []string{"a", "b"}}
	tx, err := pgsnap.Begin(ctx, conn, name)
	require.NoError(t, err)
	rows, err := tb.Page(ctx, tx.Conn().PgConn(), nil, 100)
	require.NoError(t, err)
	require.Len(t, rows, 5, "the row inserted after the export is not in the snapshot")
	require.NoError(t, tx.Rollback(ctx))

	_, err = pgsnap.Begin(ctx, conn, "00000003-0000001B-1")
	require.ErrorContains(t, err, "import snapshot")
}
