package tests

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryPipelineIsBuiltAsServeBuildsIt: outside the pipeline package's
// own tests, a pipeline is built only by service.NewPipeline (serve,
// backfill, reindex, the benches), so each honours every pipeline.*
// setting; a re-index built apart once refused a document serve had
// indexed under a raised pipeline.max_document_bytes. Indexes are opened
// only by sink.OpenIndex: the other ways are gone, so the compiler keeps
// that one.
func TestEveryPipelineIsBuiltAsServeBuildsIt(t *testing.T) {
	newPipeline := regexp.MustCompile(`\bpipeline\.New\(`)
	entries, err := os.ReadDir("..")
	require.NoError(t, err)
	src := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join("..", e.Name())
		if code, _ := filepath.Glob(filepath.Join(dir, "*", "*.go")); len(code) > 0 {
			maps.Copy(src, goSources(t, dir, false))
		} else if code, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(code) > 0 {
			maps.Copy(src, goSources(t, dir, false))
		}
	}
	require.Contains(t, src, filepath.Join("..", "service", "reindex.go"), "the tree is read")
	require.Empty(t, matches(src, newPipeline, filepath.Join("..", "pipeline")+"/", filepath.Join("..", "service", "pipeline.go")),
		"build the pipeline with service.NewPipeline")
	// The check finds what it looks for.
	require.Equal(t, []string{"x.go"}, matches(map[string]string{"x.go": "p, err := pipeline.New(cfg, st)"}, newPipeline))
}
