package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

func tables(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

var allTables = []string{"aliases", "backfill_checkpoints", "chunks", "documents", "embedding_batches", "embedding_cache", "goose_db_version", "indexes",
	"monitor_canaries", "monitor_samples", "monitor_window_vectors", "monitor_windows", "source_loads", "source_objects", "source_streams", "truncations", "watermarks"}

func TestUpTwiceIsNoop(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t) // already migrated once
	ctx := context.Background()
	require.Equal(t, allTables, tables(t, pool, schema))

	var applied int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".goose_db_version").Scan(&applied))
	require.NoError(t, migrations.Up(ctx, pool, schema, nil))
	var again int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".goose_db_version").Scan(&again))
	require.Equal(t, applied, again)
	require.Equal(t, allTables, tables(t, pool, schema))
	// Nothing leaked into public.
	require.NotContains(t, tables(t, pool, "public"), "documents")
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	// pgtest's pool has search_path = schema, public, as migrations need.
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"goose_db_version"}, tables(t, pool, schema))
	require.NoError(t, migrations.Up(ctx, pool, schema, nil))
	require.Equal(t, allTables, tables(t, pool, schema))
}

func TestUpConcurrentOnFreshSchema(t *testing.T) {
	t.Parallel()
	pool, base := pgtest.Schema(t)
	ctx := context.Background()
	schema := base + "_fresh"
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Up(ctx, pool, schema, nil) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, allTables, tables(t, pool, schema))
}

func TestUpRejectsBadSchema(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Schema(t)
	for _, schema := range []string{"", "Upper", "x;drop table y", "1abc", `a"b`} {
		err := migrations.Up(context.Background(), pool, schema, nil)
		require.ErrorIs(t, err, migrations.ErrBadSchema, schema)
	}
}

func TestEnsureVectorIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Schema(t)
	for range 2 {
		require.NoError(t, migrations.EnsureVector(context.Background(), pool))
	}
}

// Down past 00009 drops the per-alias views, which depend on chunks and
// documents (DROP TABLE chunks would fail on them).
func TestDownDropsAliasViews(t *testing.T) {
	t.Parallel()
	pool, schema := aliasedSchema(t)
	downTo(t, pool, schema, 0)
	require.Equal(t, []string{"goose_db_version"}, tables(t, pool, schema))
}

// aliasedSchema is a migrated schema with two indexes, articles_v2 the
// target of alias articles (whose view promote created).
func aliasedSchema(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "INSERT INTO "+schema+".indexes (name, model, dimensions) VALUES ('articles', 'm', 4), ('articles_v2', 'm2', 8)")
	require.NoError(t, err)
	_, err = sink.NewCatalog(pool, schema).Promote(ctx, "articles", "articles_v2", false)
	require.NoError(t, err)
	return pool, schema
}

// downTo migrates schema down to version.
func downTo(t *testing.T, pool *pgxpool.Pool, schema string, version int64) {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(context.Background(), version)
	require.NoError(t, err)
}

// TestChunkLookupsByDocumentUseAnIndex: with chunks_doc_idx dropped
// (00011), reads and deletes of one document's chunks still use an index,
// the unique (index_name, doc_id, position) constraint, and every chunk
// insert maintains one index fewer.
func TestChunkLookupsByDocumentUseAnIndex(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'chunks_doc_idx'", schema).Scan(&n))
	require.Zero(t, n, "the redundant index is gone")
	_, err = conn.Exec(ctx, "SET enable_seqscan = off")
	require.NoError(t, err)
	defer conn.Exec(ctx, "RESET enable_seqscan") //nolint:errcheck // the connection goes back to a test pool
	for _, q := range []string{
		"SELECT id, position FROM " + schema + ".chunks WHERE index_name = 'i' AND doc_id = 'd'",
		"DELETE FROM " + schema + ".chunks WHERE index_name = 'i' AND doc_id = 'd'",
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Contains(t, strings.Join(lines, "\n"), "chunks_doc_position_key", "%s", q)
	}
}

// Down past 00019 gives the index and alias views back their earlier
// columns (they read the provenance columns it drops) instead of failing
// or dropping them.
func TestDownRestoresViewsWithoutProvenance(t *testing.T) {
	t.Parallel()
	pool, schema := aliasedSchema(t)
	ctx := context.Background()
	// Opening for writing creates the index's view with provenance.
	_, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "articles_v2", Physical: true})
	require.NoError(t, err)
	downTo(t, pool, schema, 18)
	for _, view := range []string{"articles_v2_index", "articles_chunks"} {
		var cols []string
		require.NoError(t, pool.QueryRow(ctx, "SELECT array_agg(column_name::text ORDER BY ordinal_position) FROM information_schema.columns"+
			" WHERE table_schema = $1 AND table_name = $2", schema, view).Scan(&cols), view)
		require.Equal(t, []string{"id", "doc_id", "position", "text", "metadata", "tenant", "source_table", "doc_key", "embedding"}, cols, view)
	}
}
