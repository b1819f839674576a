package service

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// TestBatchLaneCutsWithinLimits: requests stay within max_batch_inputs and
// max_batch_tokens, files within each of the file limits, and a text over
// max_input_tokens is left out.
func TestBatchLaneCutsWithinLimits(t *testing.T) {
	t.Parallel()
	base := embedder.Config{Provider: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "m", Dimensions: 8,
		MaxBatchInputs: 4, MaxBatchTokens: 1000, MaxInputTokens: 50}
	texts := map[string]collected{}
	var hashes []string
	for i := range 40 {
		t := fmt.Sprintf("text number %d", i)
		texts[chunker.Hash(t)] = collected{text: t, tokens: 10}
		hashes = append(hashes, chunker.Hash(t))
	}
	long := strings.Repeat("word ", 100)
	texts[chunker.Hash(long)] = collected{text: long, tokens: 100}
	hashes = append(hashes, chunker.Hash(long))

	for _, tc := range []struct {
		name  string
		edit  func(*embedder.Config)
		files []int // texts per file
		lines int   // most lines in a file
	}{
		{"requests per file", func(c *embedder.Config) { c.Batch.MaxRequestsPerFile = 3 }, []int{12, 12, 12, 4}, 3},
		{"inputs per file", func(c *embedder.Config) { c.Batch.MaxInputsPerFile = 10 }, []int{8, 8, 8, 8, 8}, 2},
		{"tokens per request", func(c *embedder.Config) { c.MaxBatchTokens = 25; c.Batch.MaxInputsPerFile = 10 }, []int{10, 10, 10, 10}, 5},
		{"bytes per file", func(c *embedder.Config) { c.Batch.MaxFileBytes = 1 << 20 }, []int{40}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			cfg = cfg.WithDefaults()
			api, err := embedder.NewBatchAPI(cfg)
			require.NoError(t, err)
			l := &lane{api: api, cfg: cfg, ix: &Index{Name: "articles"}, texts: texts}
			files, tooLong := l.cut(hashes)
			require.Equal(t, 1, tooLong)
			var sizes []int
			seen := map[string]bool{}
			for _, f := range files {
				sizes = append(sizes, f.Inputs)
				require.LessOrEqual(t, len(f.LineInputs), tc.lines)
				require.Len(t, f.Hashes, f.Inputs)
				require.False(t, seen[f.FileName], "file names are unique")
				seen[f.FileName] = true
				for _, n := range f.LineInputs {
					require.LessOrEqual(t, n, cfg.MaxBatchInputs)
					require.LessOrEqual(t, n*10, cfg.MaxBatchTokens)
				}
			}
			require.Equal(t, tc.files, sizes)
		})
	}
}

// TestBatchLaneCutsByBytes: a file stops before max_file_bytes.
func TestBatchLaneCutsByBytes(t *testing.T) {
	t.Parallel()
	cfg := embedder.Config{Provider: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "m", Dimensions: 8,
		MaxBatchInputs: 1, Batch: embedder.BatchConfig{MaxFileBytes: 1 << 20}}.WithDefaults()
	api, err := embedder.NewBatchAPI(cfg)
	require.NoError(t, err)
	texts := map[string]collected{}
	var hashes []string
	for i := range 5 {
		t := fmt.Sprintf("%d %s", i, strings.Repeat("x", 300<<10)) // a 300 KiB line
		texts[chunker.Hash(t)] = collected{text: t, tokens: 10}
		hashes = append(hashes, chunker.Hash(t))
	}
	cfg.MaxInputTokens = 100
	l := &lane{api: api, cfg: cfg, ix: &Index{Name: "articles"}, texts: texts}
	files, _ := l.cut(hashes)
	var sizes []int
	for _, f := range files {
		sizes = append(sizes, f.Inputs)
	}
	require.Equal(t, []int{3, 2}, sizes, "three 300 KiB lines fit 1 MiB, four do not")
}
