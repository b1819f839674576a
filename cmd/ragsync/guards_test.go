package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// readOnlyRole creates a login role with USAGE on schema and SELECT on its
// tables and nothing else (no CREATE anywhere), dropped at cleanup, and
// returns a URL that connects as it.
func readOnlyRole(t *testing.T, e *reindexEnv) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "ragsync_ro_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN; GRANT USAGE ON SCHEMA "+e.schema+" TO "+role+
		"; GRANT SELECT ON ALL TABLES IN SCHEMA "+e.schema+" TO "+role)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := e.pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	var create bool
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT has_database_privilege($1, current_database(), 'CREATE')", role).Scan(&create))
	require.False(t, create, "the role must not be able to create a schema")
	u := pgtest.URL()
	require.Contains(t, u, "postgres@")
	return strings.Replace(u, "postgres@", role+"@", 1)
}

// footprint is everything a command could create in the database: schemas
// named after the test's own (the typo'd one among them; other packages'
// tests create schemas of their own meanwhile, so the whole cluster's count
// would move under it), relations of the index schema, and the catalog rows
// the lifecycle and the monitor keep.
func footprint(t *testing.T, e *reindexEnv) []int64 {
	t.Helper()
	var out [7]int64
	err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_namespace WHERE left(nspname, length($1)) = $1),
		(SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace),
		(SELECT count(*) FROM indexes), (SELECT count(*) FROM aliases), (SELECT count(*) FROM monitor_canaries),
		(SELECT count(*) FROM monitor_samples), (SELECT count(*) FROM backfill_checkpoints)`, e.schema).
		Scan(&out[0], &out[1], &out[2], &out[3], &out[4], &out[5], &out[6])
	require.NoError(t, err)
	return out[:]
}

// Every read-only command, run as a role that may only read, with a typo in
// the index name: each says which indexes exist (did you mean), and none
// creates a schema, an index, a catalog row or a baseline. With the right
// name, the same role can run them.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	e := newReindexEnv(t)
	e.serve(noteEvent("c", 1, 10, "First note, about apples."), noteEvent("c", 2, 11, "Second note, about pears."))
	_, err := e.pool.Exec(context.Background(), "CREATE TABLE "+e.schema+".src_notes (id int PRIMARY KEY, body text); INSERT INTO "+e.schema+".src_notes VALUES (1, 'a note')")
	require.NoError(t, err)
	url := readOnlyRole(t, e)
	dlqFile := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(dlqFile, nil, 0o644))
	as := func(index string, extra ...string) []string {
		return append(extra, "--postgres-url", url, "--set", "postgres.schema="+e.schema, "--set", "http.listen=",
			"--set", "embedder.dimensions=16", "--set", "index="+index)
	}
	backfill := []string{"backfill", "--dry-run", "--source-url", pgtest.URL(), "--table", e.schema + ".src_notes", "--progress", "none"}
	before := footprint(t, e)
	for _, args := range [][]string{
		{"query", "apples"},
		{"monitor"},
		{"dupes"},
		backfill,
		{"repair", "--dry-run"},
		{"fidelity", "check"},
	} {
		out, err := runCLI(t, "", as("articels", args...)...)
		require.ErrorContains(t, err, `no index or alias "articels" in schema `+e.schema+` (did you mean "articles"? known: articles)`, "%v: %s", args, out)
		require.Equal(t, before, footprint(t, e), "%v created something", args)
	}
	out, err := runCLI(t, "", as("articels", "index", "list")...)
	require.NoError(t, err, out)
	require.Contains(t, out, `warning: index: no index or alias "articels"`)
	out, err = runCLI(t, "", as("articels", "dlq", "list", "--set", "source.kind=file", "--set", "source.file.path="+dlqFile)...)
	require.NoError(t, err, out)
	out, err = runCLI(t, `{"key":{"id":1},"value":{"op":"c","after":{"id":1,"body":"hi"},"source":{"connector":"postgresql","schema":"public","table":"t","lsn":42}}}`, as("articels", "inspect")...)
	require.NoError(t, err, out)
	_, err = runCLI(t, "", append(as("articles", "query", "apples"), "--set", "postgres.schema="+e.schema+"_typo")...)
	require.ErrorContains(t, err, "is not migrated")
	require.Equal(t, before, footprint(t, e))

	// The right name works with SELECT only.
	for _, args := range [][]string{{"query", "apples"}, {"index", "list"}, {"monitor"}, {"dupes"}, {"repair", "--dry-run"}, backfill} {
		out, err := runCLI(t, "", as("articles", args...)...)
		require.NoError(t, err, "%v: %s", args, out)
	}
	out, err = runCLI(t, "", as("articles", backfill...)...)
	require.NoError(t, err, out)
	require.NotContains(t, out, "applied=", "a dry run applies nothing")
	require.NotContains(t, out, "inserted=")
	require.Contains(t, out, "dry run: nothing was embedded or written")
	require.Equal(t, before, footprint(t, e))
}

// reindex --to an index of another family is refused before anything is
// written to it, with the reason; --force takes it over.
func TestReindexRefusesAnotherFamilysIndex(t *testing.T) {
	e := newReindexEnv(t)
	e.serve(noteEvent("c", 1, 10, "First note, about apples."))
	tickets := func(extra ...string) []string { return append(e.args(extra...), "--set", "index=tickets") }
	out, err := runCLI(t, "", tickets("serve", "--once", "--create-index", "--set", "source.kind=file", "--set", "source.file.path="+writeEvents(t,
		noteEvent("c", 7, 10, "A ticket about a broken printer."), noteEvent("c", 8, 11, "A ticket about a lost password.")))...)
	require.NoError(t, err, out)
	before := e.docs("tickets")

	_, err = runCLI(t, "", e.args("reindex", "--to", "tickets")...)
	require.EqualError(t, err, `reindex --to tickets: index "tickets" holds 2 documents and belongs to no family (ragsync reindex did not build it from "articles"); check --to; --force writes into it anyway when you really mean to merge them`)
	require.Equal(t, before, e.docs("tickets"), "nothing written to the refused target")
	var follows *string
	require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT follows FROM indexes WHERE name = 'tickets'").Scan(&follows))
	require.Nil(t, follows, "the refused target does not follow articles")

	// Its own family's reindex and promote make it live under tickets.
	out, err = runCLI(t, "", tickets("reindex", "--to", "tickets_v2")...)
	require.NoError(t, err, out)
	out, err = runCLI(t, "", tickets("index", "promote", "tickets_v2")...)
	require.NoError(t, err, out)
	_, err = runCLI(t, "", e.args("reindex", "--to", "tickets_v2", "--force")...)
	require.EqualError(t, err, `reindex --to tickets_v2: it is the live index of alias "tickets", not of "articles": its users would be served articles's documents; check the name`)
	_, err = runCLI(t, "", e.args("index", "promote", "tickets_v2", "--force")...)
	require.ErrorContains(t, err, `it is the live index of alias "tickets"`)
	_, err = runCLI(t, "", e.args("index", "drop", "tickets")...)
	require.EqualError(t, err, `index drop tickets: index "tickets" belongs to family "tickets", not "articles" and holds 2 documents; check the name, or run it with that family's configuration (index:); --force drops it anyway`)

	// A reindex of articles into an index of its own, interrupted or not,
	// runs again (its family claimed it).
	out, err = runCLI(t, "", e.args("reindex", "--to", "articles_v2")...)
	require.NoError(t, err, out)
	out, err = runCLI(t, "", e.args("reindex", "--to", "articles_v2")...)
	require.NoError(t, err, out)
}

func writeEvents(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return path
}

// A shadow is opened with its own full-text setting: opening it for
// dual-writing must not switch its full text on (filling every chunk's
// tsvector) because the shadow open forgot the setting.
func TestShadowOpensWithItsFullTextSetting(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	for _, name := range []string{"articles", "articles_v2"} {
		_, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Create: true, Schema: schema, Index: name, Model: "hashing-v1", Dimensions: 16, SkipFullText: true})
		require.NoError(t, err)
	}
	require.NoError(t, sink.NewCatalog(pool, schema).Follow(ctx, "articles_v2", "articles", sink.StateBuilding))
	cfg := Config{config.Default()}
	cfg.Postgres.URL, cfg.Postgres.Schema, cfg.Index, cfg.Embedder.Dimensions = pgtest.URL(), schema, "articles", 16
	off := false
	cfg.Postgres.FullText = &off
	ix, err := openIndex(ctx, cfg, newLogger(io.Discard, cfg.Log, false), nil)
	require.NoError(t, err)
	defer ix.Close()
	shadows, err := service.FamilyShadows(ctx, cfg.indexConfig(), ix, newLogger(io.Discard, cfg.Log, false))
	require.NoError(t, err)
	require.Len(t, shadows, 1)
	var fullText bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT full_text FROM indexes WHERE name = 'articles_v2'").Scan(&fullText))
	require.False(t, fullText, "opening the shadow switched its full text on")
}
