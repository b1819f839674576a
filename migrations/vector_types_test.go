package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// upTo migrates schema up to version.
func upTo(t *testing.T, pool *pgxpool.Pool, schema string, version int64) {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(context.Background(), version)
	require.NoError(t, err)
}

type hnswIndex struct {
	OID uint32
	Def string
}

func hnswOf(t *testing.T, pool *pgxpool.Pool, schema, index string) hnswIndex {
	t.Helper()
	var x hnswIndex
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT oid, pg_get_indexdef(oid) FROM pg_class WHERE oid = to_regclass($1)",
		schema+".chunks_hnsw_"+index).Scan(&x.OID, &x.Def))
	return x
}

// An install from before vector types (version 20) upgrades without
// touching its indexes: the HNSW index a vector index was built with is
// the same one afterwards (same OID and definition), the index reads as a
// vector index with pgvector's defaults, and it is searched as before.
func TestUpgradeKeepsVectorIndexes(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	downTo(t, pool, schema, 0)
	upTo(t, pool, schema, 20)

	// What the release before vector types created for an index of 4
	// dimensions, and a document written by it.
	for _, sql := range []string{
		"INSERT INTO indexes (name, model, dimensions) VALUES ('old', 'm', 4)",
		"CREATE INDEX chunks_hnsw_old ON chunks USING hnsw ((embedding::vector(4)) vector_cosine_ops) WHERE index_name = 'old'",
		"INSERT INTO documents (index_name, id, source_table, doc_key, version) VALUES ('old', 'public.t/1', 'public.t', '1', '0001'), ('old', 'public.t/2', 'public.t', '2', '0001')",
		"INSERT INTO chunks (index_name, doc_id, position, content_hash, text, embedding) VALUES" +
			" ('old', 'public.t/1', 0, 'a', 'first', '[1,0,0,0]'), ('old', 'public.t/2', 0, 'b', 'second', '[0,1,0,0]')",
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	before := hnswOf(t, pool, schema, "old")

	require.NoError(t, migrations.Up(ctx, pool, schema, nil))
	s, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "old", Model: "m", Dimensions: 4})
	require.NoError(t, err)
	require.Equal(t, before, hnswOf(t, pool, schema, "old"), "the HNSW index is not rebuilt")
	require.Equal(t, sink.TypeVector, s.Identity().Type)
	require.Equal(t, sink.HNSW{M: 16, EfConstruction: 64, EfSearch: 40}, s.Identity().HNSW)
	hits, err := s.Search(ctx, []float32{0, 1, 0.1, 0}, sink.Query{K: 2})
	require.NoError(t, err)
	require.Len(t, hits, 2)
	require.Equal(t, "public.t/2", hits[0].DocID)

	// The halfvec column is only added when a halfvec index needs it.
	var half bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'chunks' AND column_name = 'embedding_half')", schema).Scan(&half))
	require.False(t, half)
}

// Down past 00021 refuses while a halfvec or bit index exists (the earlier
// schema cannot hold it) and, without one, gives chunks back its NOT NULL
// embedding.
func TestDownPastVectorTypes(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	h, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "halves", Model: "m", Dimensions: 4, Type: sink.TypeHalfvec})
	require.NoError(t, err)
	_, err = h.Upsert(ctx, sink.Document{Table: "public.t", Key: "1", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}, Metadata: map[string]any{},
		Chunks: []sink.Chunk{{Position: 0, Hash: "a", Text: "a", Vector: []float32{1, 2, 3, 4}}}})
	require.NoError(t, err)
	// A row with both vectors or neither is refused.
	for _, set := range []string{"embedding = '[1,2,3,4]'", "embedding_half = NULL"} {
		_, err := pool.Exec(ctx, "UPDATE chunks SET "+set+" WHERE index_name = 'halves'")
		require.ErrorContains(t, err, "chunks_one_embedding", set)
	}

	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(schema+".goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 20)
	require.ErrorContains(t, err, "indexes halves are halfvec or bit indexes")
	require.ErrorContains(t, err, "ragsync index drop NAME")

	_, err = sink.NewCatalog(pool, schema).Drop(ctx, "halves", "another", false)
	require.NoError(t, err)
	downTo(t, pool, schema, 20)
	var notNull bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'embedding'", schema+".chunks").Scan(&notNull))
	require.True(t, notNull)
	require.NoError(t, migrations.Up(ctx, pool, schema, nil))
}
