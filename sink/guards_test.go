package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// holdDDLLock takes the index DDL lock of schema on a connection of its own
// (as a bulk load's HNSW build holds it) and returns its release.
func holdDDLLock(t *testing.T, schema string) func() {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), "SELECT pg_advisory_lock($1)", sink.DDLLockKeyForTest(schema))
	require.NoError(t, err)
	return func() { _ = conn.Close(context.Background()) }
}

// waitsFor runs fn while the DDL lock is held: it must not finish until the
// lock is released, and then succeed.
func waitsFor(t *testing.T, schema string, fn func() error) {
	t.Helper()
	release := holdDDLLock(t, schema)
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		release()
		t.Fatalf("finished while the DDL lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting after the lock was released")
	}
}

// The bulk path's HNSW build and opening an index (serve's start-up) take
// one lock: a serve starting during a build waits for it and then proceeds.
func TestBulkBuildAndOpenTakeTheOneDDLLock(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	_, err = bulk.Upsert(ctx, doc("a", 1, chunks("h1", "h2")))
	require.NoError(t, err)
	waitsFor(t, b.schema, func() error { return bulk.Finish(ctx, sink.BuildOptions{}) })
	waitsFor(t, b.schema, func() error {
		_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
		return err
	})
	var hnsw bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", b.schema+".chunks_hnsw_articles").Scan(&hnsw))
	require.True(t, hnsw)
}

// The bulk path caches a document's vectors when it is embedded (Upsert),
// not when its page is flushed: a kill before the flush loses no paid-for
// embedding.
func TestBulkCachesVectorsBeforeTheFlush(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	bulk, err := openBulk(t, b)
	require.NoError(t, err)
	_, err = bulk.Upsert(ctx, doc("a", 1, chunks("h1", "h2")))
	require.NoError(t, err)
	var cached int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM embedding_cache WHERE content_hash IN ('h1', 'h2')").Scan(&cached))
	require.Equal(t, 2, cached, "the vectors are cached before the page is flushed")
	var docs int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM documents").Scan(&docs))
	require.Zero(t, docs, "the document itself waits for the flush")
}

// Every index has a view <index>_index from the moment it exists, with
// only its live documents and their tenant and source table; an alias's
// view <alias>_chunks, of an alias named like an index, never clashes
// with it; dropping the index drops its view.
func TestIndexViewFromTheStart(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	d := doc("a", 1, chunks("h1", "h2"))
	d.Tenant = "acme"
	_, err := s.Upsert(ctx, d)
	require.NoError(t, err)
	_, err = s.Upsert(ctx, doc("b", 1, chunks("h3")))
	require.NoError(t, err)
	_, err = s.Delete(ctx, "public.articles", "b", ver(2), docTime)
	require.NoError(t, err)
	type row struct{ Doc, Tenant, Table string }
	read := func(view string) []row {
		rows, err := b.pool.Query(ctx, "SELECT doc_id, coalesce(tenant, ''), source_table FROM "+view+" ORDER BY doc_id, position")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return out
	}
	want := []row{{"public.articles/a", "acme", "public.articles"}, {"public.articles/a", "acme", "public.articles"}}
	require.Equal(t, want, read("articles_index"), "live documents only, before any promote")

	cat := sink.NewCatalog(b.pool, b.schema)
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "articles_v2", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	_, err = cat.Promote(ctx, "articles", "articles_v2", true)
	require.NoError(t, err)
	require.Empty(t, read("articles_chunks"), "the alias view follows articles_v2")
	require.Equal(t, want, read("articles_index"), "the index view stays the index's")

	_, err = cat.Rollback(ctx, "articles")
	require.NoError(t, err)
	_, err = cat.Drop(ctx, "articles_v2", "articles", false)
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT to_regclass('articles_v2_index') IS NOT NULL").Scan(&exists))
	require.False(t, exists, "dropped with its index")
}

// Read mode reads an index without registering or creating anything and
// refuses every write; an unknown name is an error that names the known
// ones and the nearest.
func TestOpenReadCreatesNothing(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	st, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Read, Schema: b.schema, Index: "articles"})
	require.NoError(t, err)
	require.Equal(t, sink.Identity{Name: "articles", Model: "test-model", Dimensions: dims, FullText: true, Type: sink.TypeVector, HNSW: sink.HNSW{}.WithDefaults()}, st.Identity())
	require.Equal(t, sink.Read, st.Mode())
	_, err = st.Search(ctx, vecFor("x"), sink.Query{K: 1})
	require.NoError(t, err)
	_, err = st.Upsert(ctx, doc("a", 1, chunks("h1")))
	require.ErrorIs(t, err, sink.ErrReadOnly)
	_, err = st.Delete(ctx, "public.articles", "a", ver(2), docTime)
	require.ErrorIs(t, err, sink.ErrReadOnly)
	_, err = st.Truncate(ctx, "public.articles", ver(2), docTime)
	require.ErrorIs(t, err, sink.ErrReadOnly)
	require.ErrorIs(t, st.CacheVectors(ctx, []string{"h"}, []string{"t"}, [][]float32{vecFor("h")}, ""), sink.ErrReadOnly)
	require.ErrorContains(t, st.CacheVectors(ctx, nil, nil, nil, ""), "opened with sink.Read")
	_, found, err := st.Document(ctx, sink.DocID("public.articles", "a"))
	require.NoError(t, err)
	require.False(t, found, "nothing was written")

	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Read, Schema: b.schema, Index: "artciles"})
	require.ErrorIs(t, err, sink.ErrNoIndex)
	require.EqualError(t, err, `no index or alias "artciles" in schema `+b.schema+` (did you mean "articles"? known: articles); fix index: or --index`)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM indexes").Scan(&n))
	require.Equal(t, 1, n, "nothing registered")

	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Read, Schema: b.schema + "_typo", Index: "articles"})
	require.ErrorContains(t, err, "is not migrated")
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", b.schema+"_typo").Scan(&n))
	require.Zero(t, n, "no schema created")
}

// The family rules hold in sink's API, whatever the caller: an index of
// another family, or one holding documents of none, cannot be claimed by
// reindex, promoted, rolled back to or dropped without force; another
// alias's live index never.
func TestFamiliesStayApart(t *testing.T) {
	ctx := context.Background()
	old, _, cat, b := setupFamily(t) // articles and articles_v2, with documents
	_ = old
	open := func(name string) {
		_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: name, Model: "test-model", Dimensions: dims})
		require.NoError(t, err)
	}
	var ferr *sink.FamilyError

	// articles_v2 holds documents it was never claimed for.
	err := cat.Claim(ctx, "articles_v2", "tickets", false)
	require.ErrorAs(t, err, &ferr)
	require.EqualError(t, err, `reindex --to articles_v2: index "articles_v2" holds 2 documents and belongs to no family (ragsync reindex did not build it from "tickets"); check --to; --force writes into it anyway when you really mean to merge them`)
	// An empty one is claimed, and claimed again by its own family.
	open("tickets_v2")
	require.NoError(t, cat.Claim(ctx, "tickets_v2", "tickets", false))
	require.NoError(t, cat.Claim(ctx, "tickets_v2", "tickets", false))
	// ... but not by another, even empty.
	err = cat.Claim(ctx, "tickets_v2", "articles", false)
	require.EqualError(t, err, `reindex --to tickets_v2: index "tickets_v2" belongs to family "tickets", not "articles"; check --to; --force writes into it anyway when you really mean to merge them`)

	// Promote under another alias is refused; under its own it works.
	_, err = cat.Promote(ctx, "articles", "tickets_v2", false)
	require.EqualError(t, err, `index promote tickets_v2: index "tickets_v2" belongs to family "tickets", not "articles"; check NEW and --alias; --force promotes it anyway when you really mean to merge the families`)
	open("tickets")
	_, err = cat.Promote(ctx, "tickets", "tickets_v2", true)
	require.NoError(t, err)
	// Another alias's live index: never, not even forced.
	err = cat.Claim(ctx, "tickets_v2", "articles", true)
	require.EqualError(t, err, `reindex --to tickets_v2: it is the live index of alias "tickets", not of "articles": its users would be served articles's documents; check the name`)
	_, err = cat.Promote(ctx, "articles", "tickets_v2", true)
	require.ErrorAs(t, err, &ferr)
	require.Equal(t, "tickets", ferr.LiveOf)

	// Dropping another family's index needs force.
	_, err = cat.Drop(ctx, "tickets", "articles", false)
	require.EqualError(t, err, `index drop tickets: index "tickets" belongs to family "tickets", not "articles"; check the name, or run it with that family's configuration (index:); --force drops it anyway`)

	// A previous index claimed by another family since: no rollback to it.
	require.NoError(t, cat.Claim(ctx, "tickets", "articles", true))
	_, err = cat.Rollback(ctx, "tickets")
	require.EqualError(t, err, `index rollback tickets: index "tickets" belongs to family "articles", not "tickets" (another family's reindex --to claimed it): rolling back would serve its documents under tickets; promote an index of tickets instead`)

	_, err = cat.Drop(ctx, "tickets", "articles", false)
	require.NoError(t, err, "it is articles' now")
	require.False(t, errors.Is(err, sink.ErrNoIndex))
}

// Every other DDL on an index takes the same lock: registering a new index
// (its HNSW index and view), promote and rollback (the alias view), claim,
// and drop (the index's HNSW index and view).
func TestEveryIndexDDLTakesTheOneDDLLock(t *testing.T) {
	_, _, cat, b := setupFamily(t)
	ctx := context.Background()
	waitsFor(t, b.schema, func() error {
		_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "articles_v3", Model: "model-3", Dimensions: dims})
		return err
	})
	waitsFor(t, b.schema, func() error { return cat.Claim(ctx, "articles_v2", "articles", true) })
	require.NoError(t, cat.Follow(ctx, "articles_v2", "articles", sink.StateCaughtUp))
	waitsFor(t, b.schema, func() error { _, err := cat.Promote(ctx, "articles", "articles_v2", false); return err })
	waitsFor(t, b.schema, func() error { _, err := cat.Rollback(ctx, "articles"); return err })
	waitsFor(t, b.schema, func() error { _, err := cat.Drop(ctx, "articles_v3", "articles", true); return err })
}
