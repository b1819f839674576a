package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// serveOut applies lines (a file source) with serve --once and extra
// flags, and returns what it printed.
func (e *reindexEnv) serveOut(extra []string, lines ...string) string {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "events.jsonl")
	require.NoError(e.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out, err := runCLI(e.t, "", e.args(append([]string{"serve", "--once", "--set", "source.kind=file", "--set", "source.file.path=" + path}, extra...)...)...)
	require.NoError(e.t, err, out)
	return out
}

// indexListJSON is ragsync index list --json's objects.
func indexListJSON(t *testing.T, e *reindexEnv) []indexInfo {
	t.Helper()
	out, err := runCLI(t, "", e.args("index", "list", "--json")...)
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
	return infos
}

// groupCounts is an index's chunk groups as "model version | chunker" ->
// chunks.
func groupCounts(groups []chunkGroupInfo) map[string]int64 {
	out := map[string]int64{}
	for _, g := range groups {
		out[g.modelVersion()+" | "+g.chunker()] = g.Chunks
	}
	return out
}

// serve cuts with chunker settings A, restarts with B (another
// target_tokens): the restart reports the change, naming both settings;
// index list shows the chunks of each with their counts; index status
// counts those left with A and names what re-cuts them.
func TestServeReportsAChunkerChangeAndListShowsTheMix(t *testing.T) {
	e := newReindexEnv(t)
	fpA := chunker.Config{}.WithDefaults().Fingerprint()
	fpB := chunker.Config{TargetTokens: 256}.WithDefaults().Fingerprint()
	require.NotEqual(t, fpA, fpB)

	out := e.serveOut(nil, noteEvent("c", 1, 10, "First note, about apples."), noteEvent("c", 2, 11, "Second note, about pears."))
	require.NotContains(t, out, "chunker settings changed", "a new index records its settings")
	out = e.serveOut(nil, noteEvent("c", 3, 12, "Third note, about plums."))
	require.NotContains(t, out, "chunker settings changed", "restarted with the same settings")

	out = e.serveOut([]string{"--set", "chunker.target_tokens=256"}, noteEvent("c", 4, 13, "Fourth note, about figs."))
	require.Contains(t, out, "chunker settings changed")
	require.Contains(t, out, "from="+fpA)
	require.Contains(t, out, "to="+fpB)
	require.Contains(t, out, "chunks_other_settings=3")
	require.Contains(t, out, "ragsync reindex --to")

	infos := indexListJSON(t, e)
	require.Len(t, infos, 1)
	counts := groupCounts(infos[0].ChunkGroups)
	require.Len(t, counts, 2, "%v", counts)
	var a, b int64
	for k, n := range counts {
		// The offline embedder reports no model version: unknown.
		require.NotContains(t, k, "| unknown", "written with the chunker recorded")
		switch {
		case strings.HasSuffix(k, " | "+fpA):
			a = n
		case strings.HasSuffix(k, " | "+fpB):
			b = n
		}
	}
	require.Equal(t, [2]int64{3, 1}, [2]int64{a, b}, "%v", counts)

	out, err := runCLI(t, "", e.args("index", "list")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "CHUNKS BY PROVENANCE")
	require.Regexp(t, `articles\s+\S+\s+`+fpA+`\s+3\n`, out)
	require.Regexp(t, `articles\s+\S+\s+`+fpB+`\s+1\n`, out)

	out, err = runCLI(t, "", e.args("index", "status")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "index articles: model hashing-v1, 16 dimensions, chunker "+fpB)
	require.Contains(t, out, "3 chunks cut with other chunker settings than the index's ("+fpB+")")
	require.Contains(t, out, "ragsync reindex --to articles_next, then ragsync index promote articles_next")
	require.NotContains(t, out, "unknown chunker")

	// Serve again with A: the change back is reported too.
	out = e.serveOut(nil, noteEvent("c", 5, 14, "Fifth note, about dates."))
	require.Contains(t, out, "from="+fpB)
	require.Contains(t, out, "to="+fpA)
	require.Contains(t, out, "chunks_other_settings=1")
}

// index status lists what is left after a migration: chunks of unknown
// provenance, of an older model version, documents without a render
// hash, each with what finishes it; --json counts them; an index without
// leftovers says so.
func TestIndexStatusListsTheLeftovers(t *testing.T) {
	e := newReindexEnv(t)
	ctx := context.Background()
	e.serveOut(nil, noteEvent("c", 1, 10, "First note, about apples."), noteEvent("c", 2, 11, "Second note, about pears."),
		noteEvent("c", 3, 12, "Third note, about plums."))
	exec := func(sql string) {
		t.Helper()
		_, err := e.pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	// Every row as a write after the migration records it.
	exec("UPDATE chunks SET model_version = 'hashing-v1', chunker = (SELECT chunker FROM indexes WHERE name = 'articles')")
	exec("UPDATE embedding_cache SET model_version = 'hashing-v1'")
	exec("UPDATE documents SET render_hash = 'h'")
	out, err := runCLI(t, "", e.args("index", "status")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "nothing left")

	// Note 1 written before the migration; note 2 embedded by a newer
	// model version, the one the provider last reported.
	exec("UPDATE chunks SET model_version = NULL, chunker = NULL WHERE doc_id = 'public.notes/1'")
	exec("UPDATE documents SET render_hash = NULL WHERE id = 'public.notes/1'")
	exec("UPDATE chunks SET model_version = 'hashing-v2' WHERE doc_id = 'public.notes/2'")
	exec("UPDATE embedding_cache SET model_version = 'hashing-v2', created_at = now() + interval '1 hour' WHERE content_hash = (SELECT content_hash FROM chunks WHERE doc_id = 'public.notes/2' LIMIT 1)")

	out, err = runCLI(t, "", e.args("index", "status")...)
	require.NoError(t, err, out)
	for _, want := range []string{
		"1 chunks cut with unknown chunker settings",
		"1 chunks embedded by an unknown model version",
		"1 chunks embedded by another model version than the newest seen (hashing-v2)",
		"ragsync repair",
		"1 documents without a render hash",
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `\nunknown\s+unknown\s+1\n`, out)
	out, err = runCLI(t, "", e.args("index", "status", "--json")...)
	require.NoError(t, err, out)
	var st struct {
		Index string     `json:"index"`
		Left  []leftover `json:"left"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "articles", st.Index)
	require.Len(t, st.Left, 4)

	_, err = runCLI(t, "", e.args("index", "status", "artciles")...)
	require.ErrorContains(t, err, `"artciles"`)
}

// Every writer that cuts records its chunker settings: backfill on the
// index, reindex on the index it builds, serve on its index and on the
// shadows it dual-writes, each change reported.
func TestWritersRecordTheirChunker(t *testing.T) {
	w := newPGWorld(t)
	ctx := context.Background()
	fp := func(target int) string { return chunker.Config{TargetTokens: target}.WithDefaults().Fingerprint() }
	recorded := func(index string) string {
		t.Helper()
		var s string
		require.NoError(t, w.r.Conn.QueryRow(ctx, "SELECT coalesce(chunker, '') FROM "+w.schema+".indexes WHERE name = $1", index).Scan(&s))
		return s
	}
	w.r.Exec(t, "INSERT INTO "+w.r.Schema+".articles VALUES (1, 'one', 'Tide pools hold anemones.')")
	out, err := runCLI(t, "", "backfill", "--config", w.cfg, "--progress", "none", "--set", "chunker.target_tokens=300")
	require.NoError(t, err, out)
	require.Equal(t, fp(300), recorded("articles"))

	out, err = runCLI(t, "", "reindex", "--config", w.cfg, "--to", "articles_v2", "--set", "chunker.target_tokens=256")
	require.NoError(t, err, out)
	require.Equal(t, fp(256), recorded("articles_v2"))
	require.Equal(t, fp(300), recorded("articles"), "reindex only reads the live index")

	out, err = runCLI(t, "", "serve", "--once", "--config", w.cfg, "--set", "chunker.target_tokens=200")
	require.NoError(t, err, out)
	require.Equal(t, fp(200), recorded("articles"))
	require.Equal(t, fp(200), recorded("articles_v2"), "the shadow serve dual-writes")
	require.Contains(t, out, "from="+fp(300)+" to="+fp(200))
	require.Contains(t, out, "from="+fp(256)+" to="+fp(200))
}
