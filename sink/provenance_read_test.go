package sink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// provenanceDoc writes document key with provenance on its chunks, as the
// pipeline writes it: the model version, chunker and trace id of the
// write, the source, position and commit time of its version.
func provenanceDoc(t *testing.T, s *sink.Store, key string, hashes ...string) sink.Document {
	t.Helper()
	d := doc(key, 1, chunks(hashes...))
	d.Version.Source = "pg:7316999/appdb"
	d.Provenance = sink.Provenance{ModelVersion: "test-model-2026-01-01", Chunker: "content-defined/512/128/1024",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	_, err := s.Upsert(context.Background(), d)
	require.NoError(t, err)
	return d
}

// forgetProvenance makes key's chunks look written before provenance was
// recorded: every provenance column NULL, as the migration leaves old rows.
func forgetProvenance(t *testing.T, b *testBundle, key string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), "UPDATE "+b.schema+".chunks SET model_version = NULL, chunker = NULL, source = NULL,"+
		" source_position = NULL, committed_at = NULL, trace_id = NULL WHERE doc_id = $1", "public.articles/"+key)
	require.NoError(t, err)
}

// A hit carries its chunk's provenance as the write recorded it, and the
// index's model and dimensions; a chunk written before provenance was
// recorded reads as unknown (empty, zero time), with the index's model and
// dimensions still known. Both searches read the same columns.
func TestHitProvenance(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	d := provenanceDoc(t, s, "new", "p1")
	provenanceDoc(t, s, "old", "p2")
	forgetProvenance(t, b, "old")

	want := map[string]sink.Hit{
		"public.articles/new": {Model: "test-model", Dimensions: dims, ModelVersion: "test-model-2026-01-01",
			Chunker: "content-defined/512/128/1024", Source: "pg:7316999/appdb", SourcePosition: d.Version.Position(),
			CommittedAt: docTime, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
		"public.articles/old": {Model: "test-model", Dimensions: dims},
	}
	provenance := func(h sink.Hit) sink.Hit {
		return sink.Hit{Model: h.Model, Dimensions: h.Dimensions, ModelVersion: h.ModelVersion, Chunker: h.Chunker,
			Source: h.Source, SourcePosition: h.SourcePosition, CommittedAt: h.CommittedAt.UTC(), TraceID: h.TraceID}
	}
	require.Equal(t, "pg:0000000000000001", d.Version.Position())

	hits, err := s.Search(ctx, vecFor("p1"), sink.Query{})
	require.NoError(t, err)
	require.Len(t, hits, 2)
	for _, h := range hits {
		require.Equal(t, want[h.DocID], provenance(h), h.DocID)
	}
	hits, err = s.SearchText(ctx, "text of", sink.Query{})
	require.NoError(t, err)
	require.Len(t, hits, 2)
	for _, h := range hits {
		require.Equal(t, want[h.DocID], provenance(h), "full text: %s", h.DocID)
	}

	// A reader opened on the index's name alone learns its model and
	// dimensions from the catalog.
	r, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Read, Schema: b.schema, Index: "articles"})
	require.NoError(t, err)
	hits, err = r.Search(ctx, vecFor("p1"), sink.Query{K: 1})
	require.NoError(t, err)
	require.Equal(t, want["public.articles/new"], provenance(hits[0]))
}

// The view definition releases before provenance created, by hand.
func oldViewSQL(schema, view, index string, dims int) string {
	return fmt.Sprintf("CREATE VIEW %s.%s AS SELECT c.id, c.doc_id, c.position, c.text, d.metadata, d.tenant, d.source_table, d.doc_key,"+
		" c.embedding::vector(%d) AS embedding"+
		" FROM %s.chunks c JOIN %s.documents d ON d.index_name = c.index_name AND d.id = c.doc_id"+
		" WHERE c.index_name = '%s' AND d.deleted_at IS NULL", schema, view, dims, schema, schema, index)
}

func viewColumns(t *testing.T, b *testBundle, view string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1)"+
		" AND attnum > 0 AND NOT attisdropped ORDER BY attnum", b.schema+"."+view)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return cols
}

// viewRow is a view row's identity and provenance; NULL reads as nil.
type viewRow struct {
	DocID, Model                              string
	Dims                                      int
	Version, Chunker, Source, Position, Trace *string
	Committed                                 *time.Time
}

var newViewColumns = []string{"id", "doc_id", "position", "text", "metadata", "tenant", "source_table", "doc_key", "embedding",
	"model", "dimensions", "model_version", "chunker", "source", "source_position", "committed_at", "trace_id"}

// An index created with the view of a release before provenance gets the
// new columns appended when it is opened for writing: its own view and
// the view of an alias that points to it, replaced in place (a view an
// application built on top of them survives). The columns read the
// chunk's provenance, NULL for rows written before it was recorded.
func TestViewUpgradeAddsProvenanceColumns(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	require.Equal(t, newViewColumns, viewColumns(t, b, "articles_index"), "a new index's view has the provenance columns")

	d := provenanceDoc(t, s, "new", "p1")
	provenanceDoc(t, s, "old", "p2")
	forgetProvenance(t, b, "old")
	_, err := sink.NewCatalog(b.pool, b.schema).Promote(ctx, "docs", "articles", false)
	require.NoError(t, err)

	// Put back the views as an older release created them, with an
	// application's view on each.
	for _, v := range []string{"articles_index", "docs_chunks"} {
		_, err := b.pool.Exec(ctx, fmt.Sprintf("DROP VIEW %s.%s", b.schema, v))
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, oldViewSQL(b.schema, v, "articles", dims))
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, fmt.Sprintf("CREATE VIEW %s.app_%s AS SELECT doc_id, text FROM %s.%s", b.schema, v, b.schema, v))
		require.NoError(t, err)
		require.Equal(t, newViewColumns[:9], viewColumns(t, b, v))
	}

	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	for _, v := range []string{"articles_index", "docs_chunks"} {
		require.Equal(t, newViewColumns, viewColumns(t, b, v), v)
		require.Equal(t, []string{"doc_id", "text"}, viewColumns(t, b, "app_"+v), "the application's view on %s is kept", v)

		rows, err := b.pool.Query(ctx, "SELECT doc_id, model, dimensions, model_version, chunker, source, source_position, trace_id, committed_at"+
			" FROM "+b.schema+"."+v+" ORDER BY doc_id")
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (viewRow, error) {
			var x viewRow
			err := r.Scan(&x.DocID, &x.Model, &x.Dims, &x.Version, &x.Chunker, &x.Source, &x.Position, &x.Trace, &x.Committed)
			if x.Committed != nil {
				utc := x.Committed.UTC()
				x.Committed = &utc
			}
			return x, err
		})
		require.NoError(t, err)
		require.Len(t, got, 2)
		str := func(s string) *string { return &s }
		at := docTime
		require.Equal(t, viewRow{"public.articles/new", "test-model", dims, str("test-model-2026-01-01"), str("content-defined/512/128/1024"),
			str("pg:7316999/appdb"), str(d.Version.Position()), str("4bf92f3577b34da6a3ce929d0e0e4736"), &at}, got[0], v)
		require.Equal(t, viewRow{DocID: "public.articles/old", Model: "test-model", Dims: dims}, got[1], "%s: old rows read NULL: unknown", v)
	}

	// Opening again finds nothing to upgrade.
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	require.Equal(t, newViewColumns, viewColumns(t, b, "articles_index"))
}

// The view's model column is a subquery run once per query: a
// nearest-neighbour query that reads every column still uses the HNSW
// index. Seq scans are off only so that the planner shows whether the
// index is usable at all on a table this small.
func TestIndexViewWithProvenanceUsesHNSW(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for i := range 50 {
		_, err := s.Upsert(ctx, doc(fmt.Sprint(i), 1, chunks(fmt.Sprintf("h%d", i))))
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, fmt.Sprintf("ANALYZE %s.chunks; ANALYZE %s.documents", b.schema, b.schema))
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN SELECT * FROM "+b.schema+".articles_index ORDER BY embedding <=> $1 LIMIT 5",
		pgvector.NewVector(vecFor("x")))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Index Scan using chunks_hnsw_articles", plan)
}
