package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// serveWith runs serve --once over one document with an OpenAI-compatible
// embedder at baseURL and the extra settings.
func serveWith(t *testing.T, baseURL string, extra ...string) (string, error) {
	t.Helper()
	_, schema := pgtest.Schema(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(noteEvent("c", 1, 10, "a note about tide pools")+"\n"), 0o644))
	args := append([]string{"serve", "--once", "--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema,
		"--set", "http.listen=", "--set", "index=notes", "--set", "source.kind=file", "--set", "source.file.path=" + path,
		"--set", "embedder.provider=openai", "--set", "embedder.base_url=" + baseURL, "--set", "embedder.model=embed-x",
		"--set", "embedder.dimensions=16", "--set", "embedder.api_key=sk-test-probe"}, extra...)
	return runCLI(t, "", args...)
}

// A model that answers with another size stops serve at start-up, naming
// the setting, before any document is read.
func TestServeProbesTheModelSize(t *testing.T) {
	srv := openaitest.New(t, openaitest.Options{Dimensions: 8})
	out, err := serveWith(t, srv.URL)
	t.Log(out)
	require.ErrorContains(t, err, `check the embedder at start-up: embed 1 texts with embed-x: batch 0..0: model "embed-x" returned 8-dimension vectors, the index stores 16 (embedder.dimensions)`)
	require.ErrorContains(t, err, "set embedder.send_dimensions: always")
	require.Equal(t, int64(1), srv.Requests.Load(), "only the probe")

	// Asked for: a server that honours "dimensions" passes.
	out, err = serveWith(t, srv.URL, "--set", "embedder.send_dimensions=always")
	require.NoError(t, err, out)
}

// A provider down at start-up only warns; the run goes on.
func TestServeProbeFailureWarns(t *testing.T) {
	srv := openaitest.New(t, openaitest.Options{Dimensions: 16})
	srv.FailNext(1, openaitest.Fault{Status: 503})
	out, err := serveWith(t, srv.URL, "--set", "embedder.max_retries=-1")
	require.NoError(t, err, out)
	require.Contains(t, out, "the embedder did not answer the start-up probe; starting anyway")
	require.Contains(t, out, "applied=1")
}

// The encoding fallback warning reaches serve's log with the password of
// embedder.base_url masked.
func TestServeEncodingFallbackWarningIsRedacted(t *testing.T) {
	srv := openaitest.New(t, openaitest.Options{Dimensions: 16, NoBase64: "ignore"})
	base := strings.Replace(srv.URL, "http://", "http://ragsync:pr0be-s3cret@", 1)
	out, err := serveWith(t, base)
	require.NoError(t, err, out)
	require.Contains(t, out, "does not answer in base64")
	require.NotContains(t, out, "pr0be-s3cret")
}
