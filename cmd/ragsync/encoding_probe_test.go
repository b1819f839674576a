package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// With encoding_format auto (the default) against a server without base64,
// serve --once embeds every chunk once: whether the server answers base64
// requests with JSON numbers or refuses them, and whether the start-up
// probe settled the format or failed before it could (the pipeline's first
// requests then learn it).
func TestServeEmbedsEachChunkOnceWithoutBase64(t *testing.T) {
	const docs = 40 // one chunk each
	for _, mode := range []string{"ignore", "reject"} {
		for _, probe := range []string{"answered", "failed"} {
			t.Run(mode+"/probe "+probe, func(t *testing.T) {
				srv := openaitest.New(t, openaitest.Options{Dimensions: 16, NoBase64: mode})
				probeInputs := int64(1)
				if probe == "failed" {
					srv.FailNext(1, openaitest.Fault{Status: 503})
					probeInputs = 0
				}
				_, schema := pgtest.Schema(t)
				var lines []string
				for id := 1; id <= docs; id++ {
					lines = append(lines, noteEvent("c", id, id, fmt.Sprintf("note %d about tide pools, sea stars and anemones", id)))
				}
				path := filepath.Join(t.TempDir(), "events.jsonl")
				require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
				out, err := runCLI(t, "", "serve", "--once", "--postgres-url", pgtest.URL(), "--set", "postgres.schema="+schema,
					"--set", "http.listen=", "--set", "index=notes", "--set", "source.kind=file", "--set", "source.file.path="+path,
					"--set", "embedder.provider=openai", "--set", "embedder.base_url="+srv.URL, "--set", "embedder.model=embed-x",
					"--set", "embedder.dimensions=16", "--set", "embedder.api_key=sk-test", "--set", "embedder.max_retries=-1")
				require.NoError(t, err, out)
				require.Contains(t, out, fmt.Sprintf("chunks_embedded=%d", docs))
				require.Equal(t, docs+probeInputs, srv.Inputs.Load(), "inputs the server embedded: each chunk once, plus the probe's text\n%s", out)
			})
		}
	}
}
