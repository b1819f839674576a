package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

// TestConfigErrorsInTheUsersWords: config mistakes are reported by the YAML
// path the user wrote, with the closest valid key, never by Go type names.
func TestConfigErrorsInTheUsersWords(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		want     []string
		wantNone []string
	}{
		{name: "typo in a nested key", file: "chunker:\n  target_token: 256\n",
			want:     []string{"chunker.target_token (line 2): unknown setting; did you mean target_tokens?"},
			wantNone: []string{"config.ChunkerConfig", "main.ChunkerConfig", "not found in type"}},
		{name: "typo in a section", file: "embeder:\n  model: x\n", want: []string{"embeder (line 1): unknown setting; did you mean embedder?"}},
		{name: "inside a list", file: "tables:\n  - match: public.a\n    metdata: [x]\n", want: []string{"tables[0].metdata (line 3): unknown setting; did you mean metadata?"}},
		{name: "inlined front-door settings", file: "frontdoor:\n  enabled: true\n  cache_tl: 5m\n", want: []string{"frontdoor.cache_tl (line 3): unknown setting; did you mean cache_ttl?"}},
		{name: "typo in index_type", file: "index_typ: halfvec\n", want: []string{"index_typ (line 1): unknown setting; did you mean index_type?"}},
		{name: "typo in hnsw", file: "hnsw:\n  ef_serch: 100\n", want: []string{"hnsw.ef_serch (line 2): unknown setting; did you mean ef_search?"}},
		{name: "nothing close", file: "zzzzzzzzzz: 1\n", want: []string{"zzzzzzzzzz (line 1): unknown setting; see the README"}, wantNone: []string{"did you mean"}},
		{name: "every unknown key at once", file: "chunker:\n  target_token: 1\nembeder: {}\n", want: []string{"chunker.target_token", "embeder (line 3)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(writeFile(t, tc.file), nil)
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			for _, w := range tc.wantNone {
				require.NotContains(t, err.Error(), w)
			}
		})
	}
	cfg, err := config.Load(writeFile(t, "frontdoor:\n  enabled: true\n  cache_ttl: 5m\n  bloom:\n    bits: 1024\ntables:\n  - match: public.a\n    metadata: [x]\nindex_type: bit\nhnsw:\n  rerank_candidates: 500\n"), nil)
	require.NoError(t, err, "valid nested, inlined and listed keys pass")
	require.EqualValues(t, 1024, cfg.FrontDoor.Bloom.Bits)
	require.Equal(t, 500, cfg.HNSW.RerankCandidates)
}

// TestHashingProviderIgnoresModelWithAWarning: provider hashing has one
// model; a model left over from an OpenAI config is ignored, said once.
func TestHashingProviderIgnoresModelWithAWarning(t *testing.T) {
	path := writeFile(t, "embedder:\n  provider: hashing\n  model: text-embedding-3-small\n  dimensions: 128\n")
	cfg, err := config.Load(path, nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(false), "an explicit model is not an error under hashing")
	require.Equal(t, "hashing-v1", cfg.EmbedderConfig().Model)
	ws := cfg.Warnings()
	require.Len(t, ws, 1)
	require.Contains(t, ws[0], `embedder.model: "text-embedding-3-small" is ignored with provider hashing`)

	// The CLI prints it on stderr.
	_, stderr, err := runCtx(t.Context(), "inspect", "--config", path, filepath.Join(t.TempDir(), "none.jsonl"))
	require.Error(t, err) // the file is missing; the warning came first
	require.Contains(t, stderr, "warning: embedder.model")

	cfg.Embedder.Model = ""
	require.Empty(t, cfg.Warnings())
}

func TestDimensionsErrorFitsTheProvider(t *testing.T) {
	cfg := Config{config.Default()}
	cfg.Embedder.Dimensions = 0
	err := cfg.Validate(false)
	require.ErrorContains(t, err, "embedder.dimensions")
	require.ErrorContains(t, err, "hashing")
	require.NotContains(t, err.Error(), "text-embedding-3-small", "no OpenAI sizes for the offline embedder")

	cfg.Embedder.Provider = "openai"
	cfg.Embedder.Model = "text-embedding-3-small"
	cfg.Embedder.APIKey = "sk-x"
	require.ErrorContains(t, cfg.Validate(false), "1536 for text-embedding-3-small")
}

// TestMissingEventsFileBeforeConnecting: a missing events file is reported
// by validation, before serve connects to anything (here: a Postgres that
// does not exist, whose error must not appear).
func TestMissingEventsFileBeforeConnecting(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "events.jsonl")
	_, _, err := runCtx(t.Context(), "serve", "--once", "--set", "source.kind=file", "--set", "source.file.path="+missing,
		"--postgres-url", "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	require.ErrorContains(t, err, "source.file.path: "+missing+" does not exist")
	require.NotContains(t, err.Error(), "connect postgres")

	dir := t.TempDir()
	cfg := Config{config.Default()}
	cfg.Source.Kind, cfg.Source.File.Path = "file", dir
	require.ErrorContains(t, cfg.Validate(true), "is a directory")
	f := filepath.Join(dir, "e.jsonl")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	cfg.Source.File.Path = f
	require.NoError(t, cfg.Validate(true))
}

// TestMissingDatabaseSaysCreateIt: a running Postgres without the database
// is not "is Postgres running? run make services".
func TestMissingDatabaseSaysCreateIt(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	url := strings.Replace(pgURLWithDB(t), "/test?", "/ragsync_no_such_db_i16?", 1)
	_, _, err := runCtx(t.Context(), "migrate", "--postgres-url", url)
	require.ErrorContains(t, err, `has no database "ragsync_no_such_db_i16"`)
	require.ErrorContains(t, err, "createdb ragsync_no_such_db_i16")
	require.NotContains(t, err.Error(), "make services")
}

// pgURLWithDB is the test database URL in the form postgres://…/test?….
func pgURLWithDB(t *testing.T) string {
	u := testDatabaseURL()
	if !strings.Contains(u, "/test?") {
		t.Skipf("TEST_DATABASE_URL %q is not of the form …/test?…", u)
	}
	return u
}

func testDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ragsync.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}
