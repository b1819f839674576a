package sink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func TestSearchFiltersAndOrder(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()

	put := func(table, key, tenant string, meta map[string]any, vec []float32) {
		t.Helper()
		d := doc(key, 1, []sink.Chunk{{Position: 0, Hash: table + key, Text: "t", Vector: vec}})
		d.Table, d.Tenant, d.Metadata = table, tenant, meta
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}
	// Angles from the query direction (1,0,0,0) grow with the key number.
	put("public.articles", "1", "acme", map[string]any{"lang": "en", "tags": []any{"x", "y"}}, []float32{1, 0, 0, 0})
	put("public.articles", "2", "acme", map[string]any{"lang": "de"}, []float32{1, 0.5, 0, 0})
	put("public.articles", "3", "globex", map[string]any{"lang": "en"}, []float32{1, 1, 0, 0})
	put("public.pages", "4", "acme", map[string]any{"lang": "en"}, []float32{0.5, 1, 0, 0})
	put("public.pages", "5", "", nil, []float32{0, 0, 1, 0})
	q := []float32{2, 0, 0, 0}

	tests := []struct {
		name  string
		query sink.Query
		want  []string
	}{
		{"all by score", sink.Query{AllTenants: true}, []string{"public.articles/1#0", "public.articles/2#0", "public.articles/3#0", "public.pages/4#0", "public.pages/5#0"}},
		{"k limits", sink.Query{K: 2, AllTenants: true}, []string{"public.articles/1#0", "public.articles/2#0"}},
		{"tenant", sink.Query{Tenant: "acme"}, []string{"public.articles/1#0", "public.articles/2#0", "public.pages/4#0"}},
		{"metadata", sink.Query{Filter: map[string]any{"lang": "en"}, AllTenants: true}, []string{"public.articles/1#0", "public.articles/3#0", "public.pages/4#0"}},
		{"metadata array containment", sink.Query{Filter: map[string]any{"tags": []any{"y"}}, AllTenants: true}, []string{"public.articles/1#0"}},
		{"table", sink.Query{Table: "public.pages", AllTenants: true}, []string{"public.pages/4#0", "public.pages/5#0"}},
		{"all filters", sink.Query{K: 1, Tenant: "acme", Filter: map[string]any{"lang": "en"}, Table: "public.pages"}, []string{"public.pages/4#0"}},
		{"nothing matches", sink.Query{Tenant: "nobody"}, []string{}},
	}
	_, err := s.Search(ctx, q, sink.Query{})
	require.ErrorIs(t, err, sink.ErrTenantRequired, "a search that names no tenant on an index with tenants")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := s.Search(ctx, q, tc.query)
			require.NoError(t, err)
			require.Equal(t, tc.want, hitIDs(hits))
			for i := 1; i < len(hits); i++ {
				require.GreaterOrEqual(t, hits[i-1].Score, hits[i].Score)
			}
		})
	}

	hits, err := s.Search(ctx, q, sink.Query{K: 1, AllTenants: true})
	require.NoError(t, err)
	require.InDelta(t, 1.0, hits[0].Score, 1e-6, "same direction scores 1")
	require.Equal(t, "public.articles", hits[0].Table)
	require.Equal(t, "1", hits[0].Key)
	require.Equal(t, "en", hits[0].Metadata["lang"])
	hits, err = s.Search(ctx, []float32{0, 0, 1, 0}, sink.Query{K: 1, AllTenants: true})
	require.NoError(t, err)
	require.Equal(t, "public.pages/5", hits[0].DocID)

	for name, tc := range map[string]struct {
		vec []float32
		q   sink.Query
	}{
		"wrong dims": {[]float32{1, 2}, sink.Query{AllTenants: true}},
		"negative k": {q, sink.Query{K: -1, AllTenants: true}},
		"k too big":  {q, sink.Query{K: sink.MaxK + 1, AllTenants: true}},
	} {
		_, err := s.Search(ctx, tc.vec, tc.q)
		require.ErrorIs(t, err, sink.ErrInvalidQuery, name)
	}
}

func TestSearchText(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	texts := map[string]string{
		"1": "How to reset your password when the login page refuses it",
		"2": "Password rules: twelve characters, one digit",
		"3": "Shipping times for orders outside the EU",
	}
	for key, text := range texts {
		d := doc(key, 1, []sink.Chunk{{Position: 0, Hash: "h" + key, Text: text, Vector: vecFor("h" + key)}})
		if key == "2" {
			d.Tenant = "acme"
		}
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}

	hits, err := s.SearchText(ctx, "reset my password", sink.Query{AllTenants: true})
	require.NoError(t, err)
	require.Equal(t, []string{"public.articles/1#0", "public.articles/2#0"}, hitIDs(hits), "more matching words rank first")
	require.Greater(t, hits[0].Score, hits[1].Score)
	require.Equal(t, texts["1"], hits[0].Text)

	hits, err = s.SearchText(ctx, "PASSWORD", sink.Query{Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, []string{"public.articles/2#0"}, hitIDs(hits))

	for _, q := range []string{"", "   ", "!!! ???", "nonexistentword"} {
		hits, err = s.SearchText(ctx, q, sink.Query{AllTenants: true})
		require.NoError(t, err, q)
		require.Empty(t, hits, q)
	}
	// Operators in user text are words, not syntax.
	hits, err = s.SearchText(ctx, "shipping & | ! (orders", sink.Query{K: 1, AllTenants: true})
	require.NoError(t, err)
	require.Equal(t, []string{"public.articles/3#0"}, hitIDs(hits))
}

func TestSearchUsesHNSWIndex(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	for i := range 50 {
		_, err := s.Upsert(ctx, doc(fmt.Sprint(i), 1, chunks(fmt.Sprintf("h%d-a", i), fmt.Sprintf("h%d-b", i))))
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, fmt.Sprintf("ANALYZE %s.chunks; ANALYZE %s.documents", b.schema, b.schema))
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The table is tiny, so without this the planner rightly prefers a
	// sequential scan; what matters is that the index is usable at all.
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	require.NoError(t, err)
	sql, args := sink.SearchSQLForTest(s, vecFor("x"), sink.Query{K: 5, Filter: map[string]any{"lang": "en"}})
	rows, err := tx.Query(ctx, "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, strings.Join(plan, "\n"), "chunks_hnsw_articles", strings.Join(plan, "\n"))
}

// With the HNSW index forced, a selective filter must still yield K hits:
// plain HNSW returns ef_search candidates and filters afterwards, which
// would starve the result; Search turns on pgvector's iterative scan.
func TestSearchFilteredThroughHNSWReturnsK(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	cfg := b.pool.Config()
	// Small tables and a well-estimated filter make the planner rightly
	// avoid the index; these settings leave it the HNSW scan only.
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	cfg.ConnConfig.RuntimeParams["enable_sort"] = "off"
	cfg.ConnConfig.RuntimeParams["enable_bitmapscan"] = "off"
	forced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(forced.Close)
	s, err := sink.OpenIndex(ctx, forced, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)

	for i := range 300 {
		d := doc(fmt.Sprint(i), 1, chunks(fmt.Sprint("c", i)))
		if i%60 == 0 {
			d.Tenant = "rare"
		}
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}
	_, err = forced.Exec(ctx, "ANALYZE "+b.schema+".chunks")
	require.NoError(t, err)
	query := sink.Query{K: 5, Tenant: "rare"}
	sql, args := sink.SearchSQLForTest(s, vecFor("c7"), query)
	rows, err := forced.Query(ctx, "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, strings.Join(plan, "\n"), "Index Scan using chunks_hnsw_articles", "test must exercise the HNSW path")

	hits, err := s.Search(ctx, vecFor("c7"), query)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.articles/0#0", "public.articles/60#0", "public.articles/120#0",
		"public.articles/180#0", "public.articles/240#0"}, hitIDs(hits))
}
