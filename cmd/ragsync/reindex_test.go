package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/internal/pgtest"
)

func TestReindexAndIndexCommands(t *testing.T) {
	e := newReindexEnv(t)
	pool, ctx, args, event, serve, docs := e.pool, context.Background(), e.args, noteEvent, e.serve, e.docs

	serve(event("c", 1, 10, "First note, about apples."), event("c", 2, 11, "Second note, about pears."),
		event("c", 3, 12, "Third note, about plums."), event("d", 3, 13, ""))
	out, err := runCLI(t, "", args("reindex", "--to", "articles_v2", "--dimensions", "32")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "reindex articles -> articles_v2 (hashing-v1, 32 dimensions, vector): 3 documents")
	started := strings.Index(out, "reindex articles -> articles_v2 (hashing-v1, 32 dimensions, vector) started: reading every document of articles")
	require.GreaterOrEqual(t, started, 0, "a start line: %s", out)
	require.Less(t, started, strings.Index(out, "3 documents in"), "before the pass's summary")
	require.Equal(t, docs("articles"), docs("articles_v2"), "same documents, versions, tombstones and chunks")
	var dims int
	require.NoError(t, pool.QueryRow(ctx, "SELECT dimensions FROM indexes WHERE name = 'articles_v2'").Scan(&dims))
	require.Equal(t, 32, dims)
	var hnsw bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'chunks_hnsw_articles_v2')", e.schema).Scan(&hnsw))
	require.True(t, hnsw)

	require.Contains(t, out, "no serve of articles is running")
	require.Contains(t, out, "articles_v2 is caught up")

	// Changes after the reindex: serve writes them to both indexes (the
	// new one follows articles), so running reindex again applies nothing.
	serve(event("u", 1, 20, "First note, now about quinces."), event("d", 2, 21, ""))
	require.Equal(t, docs("articles"), docs("articles_v2"))
	out, err = runCLI(t, "", args("reindex", "--to", "articles_v2", "--dimensions", "32")...)
	require.NoError(t, err, out)
	require.NotContains(t, out, "applied=", "serve dual-wrote every change")
	require.Equal(t, docs("articles"), docs("articles_v2"))

	out, err = runCLI(t, "", args("index", "list", "--json")...)
	require.NoError(t, err, out)
	var infos []indexInfo
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var x indexInfo
		require.NoError(t, json.Unmarshal([]byte(line), &x))
		infos = append(infos, x)
	}
	require.Len(t, infos, 2)
	require.Equal(t, "articles", infos[0].Name)
	require.Equal(t, "live", infos[0].State)
	require.Equal(t, int64(1), infos[0].Documents)
	require.Equal(t, "articles_v2", infos[1].Name)
	require.Equal(t, "caught-up", infos[1].State)
	require.Equal(t, "articles", infos[1].Follows)
	require.Equal(t, 32, infos[1].Dimensions)
	require.Positive(t, infos[1].HNSWBytes)

	_, err = runCLI(t, "", args("index", "drop", "articles")...)
	require.ErrorContains(t, err, "it is the configured index")
	out, err = runCLI(t, "", args("index", "drop", "articles_v2")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "dropped index articles_v2 (3 documents)")
	require.Empty(t, docs("articles_v2"))
	_, err = runCLI(t, "", args("index", "drop", "articles_v2")...)
	require.ErrorContains(t, err, `no index or alias "articles_v2"`)
}

func TestReindexErrors(t *testing.T) {
	_, schema := pgtest.Schema(t)
	base := []string{"--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema, "--set", "index=articles"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "articles"}, "is the configured index itself"},
		{[]string{"--to", "Bad-Name"}, "must be lower-case"},
		{[]string{"--to", "v2", "--dimensions", "-3"}, "embedder.dimensions"},
		{[]string{"--to", "v2"}, `index: "articles" does not exist`},
		{[]string{"--to", "v2", "--model", "text-embedding-3-large"}, `--model: provider hashing cannot embed with "text-embedding-3-large", its only model is "hashing-v1"; set embedder.provider: openai (with embedder.base_url and embedder.api_key) to build an index of text-embedding-3-large`},
	} {
		_, err := runCLI(t, "", append(append([]string{"reindex"}, tc.args...), base...)...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// TestIndexPromoteRollback walks the blue/green commands: reindex, promote
// (index: becomes an alias of the new index, with its model and size),
// serve writing both, drop refused for the live target, rollback.
func TestIndexPromoteRollback(t *testing.T) {
	e := newReindexEnv(t)
	pool, ctx, args, event, serve, docs := e.pool, context.Background(), e.args, noteEvent, e.serve, e.docs

	serve(event("c", 1, 10, "First note, about apples."), event("c", 2, 11, "Second note, about pears."))
	out, err := runCLI(t, "", args("reindex", "--to", "articles_v2", "--dimensions", "32")...)
	require.NoError(t, err, out)

	// A building index is refused unless forced.
	_, err = pool.Exec(ctx, "UPDATE indexes SET state = 'building' WHERE name = 'articles_v2'")
	require.NoError(t, err)
	_, err = runCLI(t, "", args("index", "promote", "articles_v2")...)
	require.ErrorContains(t, err, "has not caught up")
	_, err = runCLI(t, "", args("index", "promote", "nothing")...)
	require.ErrorContains(t, err, `no index or alias "nothing"`)
	_, err = runCLI(t, "", args("index", "rollback")...)
	require.ErrorContains(t, err, "is not an alias")
	out, err = runCLI(t, "", args("index", "promote", "articles_v2", "--force")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "alias articles -> articles_v2 (previous: articles)")

	// Every command resolves the alias, with articles_v2's 32 dimensions
	// (the config still says 16).
	cfg := Config{config.Default()}
	cfg.Postgres.URL, cfg.Postgres.Schema, cfg.Index, cfg.Embedder.Dimensions = pgtest.URL(), e.schema, "articles", 16
	ix, err := openIndex(ctx, cfg, newLogger(io.Discard, cfg.Log, false), nil)
	require.NoError(t, err)
	require.Equal(t, "articles_v2", ix.Name)
	require.Equal(t, "articles", ix.Alias)
	require.Equal(t, 32, ix.Emb.Dimensions())
	ix.Close()
	out, err = runCLI(t, "", args("query", "apples", "--json")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "public.notes/1")

	// serve now writes articles_v2 and keeps the retired articles too.
	serve(event("u", 1, 20, "First note, now about quinces."), event("c", 3, 21, "Third note, about plums."))
	require.Equal(t, docs("articles"), docs("articles_v2"))
	require.Len(t, docs("articles_v2"), 3)

	states := func() map[string]string {
		out, err := runCLI(t, "", args("index", "list", "--json")...)
		require.NoError(t, err, out)
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(line, "{") {
				var x indexInfo
				require.NoError(t, json.Unmarshal([]byte(line), &x))
				m[x.Name] = x.State
			}
		}
		return m
	}
	require.Equal(t, map[string]string{"articles": "retired", "articles_v2": "live"}, states())
	out, err = runCLI(t, "", args("index", "list")...)
	require.NoError(t, err, out)
	require.Regexp(t, `articles\s+articles_v2\s+articles\s`, out, "the alias table")

	_, err = runCLI(t, "", args("index", "drop", "articles_v2")...)
	require.ErrorContains(t, err, "live target of alias articles; run ragsync index rollback articles")

	out, err = runCLI(t, "", args("index", "rollback")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "alias articles -> articles (previous: articles_v2)")
	require.Equal(t, map[string]string{"articles": "live", "articles_v2": "retired"}, states())
	out, err = runCLI(t, "", args("query", "quinces", "--json")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "public.notes/1")

	out, err = runCLI(t, "", args("index", "drop", "articles_v2")...)
	require.NoError(t, err, out)
	_, err = runCLI(t, "", args("index", "rollback")...)
	require.ErrorContains(t, err, "has no previous index")
}

// reindexEnv is a schema of its own with the CLI arguments that point at it
// (16-dimension hashing embedder, index articles).
type reindexEnv struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
}

func newReindexEnv(t *testing.T) *reindexEnv {
	pool, schema := pgtest.Schema(t)
	return &reindexEnv{t: t, pool: pool, schema: schema}
}

func (e *reindexEnv) args(extra ...string) []string {
	return append(extra, "--postgres-url", pgtest.URL(), "--set", "postgres.schema="+e.schema, "--set", "http.listen=",
		"--set", "embedder.dimensions=16", "--set", "index=articles")
}

// serve applies lines (a file source) with serve --once.
func (e *reindexEnv) serve(lines ...string) {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "events.jsonl")
	require.NoError(e.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out, err := runCLI(e.t, "", e.args("serve", "--once", "--set", "source.kind=file", "--set", "source.file.path="+path)...)
	require.NoError(e.t, err, out)
}

// docs is index's documents as "version chunk-hashes" (or "deleted") by id.
func (e *reindexEnv) docs(index string) map[string]string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT d.id, d.version, d.deleted_at IS NULL, coalesce(string_agg(c.content_hash, ',' ORDER BY c.position), '')
		FROM documents d LEFT JOIN chunks c ON c.index_name = d.index_name AND c.doc_id = d.id
		WHERE d.index_name = $1 GROUP BY d.id, d.version, d.deleted_at`, index)
	require.NoError(e.t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, v, h string
		var live bool
		require.NoError(e.t, rows.Scan(&id, &v, &live, &h))
		if !live {
			h = "deleted"
		}
		// The rebuilt document keeps its position; it arrives as a
		// snapshot read, which sorts just before the same streamed
		// position, so the flag is left out of the comparison.
		v = strings.TrimSuffix(v, ";snapshot")
		out[id] = v + " " + h
	}
	require.NoError(e.t, rows.Err())
	return out
}

// noteEvent is a Debezium change of public.notes as a file-source line.
func noteEvent(op string, id int, lsn int, body string) string {
	after := fmt.Sprintf(`{"id":%d,"body":%q}`, id, body)
	before := "null"
	if op == "d" {
		after, before = "null", fmt.Sprintf(`{"id":%d}`, id)
	}
	return fmt.Sprintf(`{"key":{"id":%d},"value":{"op":%q,"before":%s,"after":%s,"source":{"connector":"postgresql","schema":"public","table":"notes","lsn":%d}}}`,
		id, op, before, after, lsn)
}

// TestReindexHonoursPipelineSettings: reindex builds its pipeline as serve
// does, from every pipeline.* setting, so a document serve indexed under a
// raised pipeline.max_document_bytes is rebuilt too, not refused at the
// default (8 MiB) halfway through the re-index.
func TestReindexHonoursPipelineSettings(t *testing.T) {
	e := newReindexEnv(t)
	const raised = "pipeline.max_document_bytes=16777216"
	// Over the default by a few words; repeated text keeps the embedding
	// work to a handful of distinct chunks.
	sentence := "A long note repeats its one sentence about apples. "
	big := strings.Repeat(sentence, 9<<20/len(sentence)+1)
	require.Greater(t, len(big), 8<<20)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	lines := noteEvent("c", 1, 10, big) + "\n" + noteEvent("c", 2, 11, "A short note, about pears.") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(lines), 0o644))
	out, err := runCLI(t, "", e.args("serve", "--once", "--set", "source.kind=file", "--set", "source.file.path="+path, "--set", raised)...)
	require.NoError(t, err, out)
	require.Len(t, e.docs("articles"), 2, "serve indexes the large document under the raised limit: %s", out)

	out, err = runCLI(t, "", e.args("reindex", "--to", "articles_v2", "--set", raised)...)
	require.NoError(t, err, out)
	require.Equal(t, e.docs("articles"), e.docs("articles_v2"), "the re-index rebuilds the large document too")
}
