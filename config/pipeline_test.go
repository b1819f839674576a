package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

func TestPipelineLimitsConfig(t *testing.T) {
	path := writeFile(t, `
pipeline:
  workers: 2
  dead_letter_window: 50
  dead_letter_max_ratio: 0.2
  max_document_bytes: 1048576
  embed_slice_chunks: 64
tables:
  - match: "public.*"
`)
	cfg, err := config.Load(path, []string{"pipeline.dead_letter_window=40"})
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(false))
	pc := cfg.PipelineConfig(nil, nil)
	require.Equal(t, 40, pc.DeadLetterWindow, "flags win")
	require.Equal(t, 0.2, pc.DeadLetterMaxRatio)
	require.Equal(t, 1<<20, pc.MaxDocumentBytes)
	require.Equal(t, 64, pc.EmbedSliceChunks)
	require.Equal(t, "public.*", pc.Tables[0].Match)

	t.Setenv("RAGSYNC_PIPELINE_MAX_DOCUMENT_BYTES", "2048")
	cfg, err = config.Load(path, nil)
	require.NoError(t, err)
	require.Equal(t, 2048, cfg.Pipeline.MaxDocumentBytes)
}

func TestPipelineLimitsValidate(t *testing.T) {
	path := writeFile(t, `
pipeline:
  dead_letter_max_ratio: 1.5
  max_document_bytes: -1
tables:
  - match: "public.[a"
`)
	cfg, err := config.Load(path, nil)
	require.NoError(t, err)
	err = cfg.Validate(false)
	require.ErrorContains(t, err, "pipeline.dead_letter_max_ratio")
	require.ErrorContains(t, err, "pipeline.max_document_bytes")
	require.ErrorContains(t, err, "tables[0].match", "a malformed glob is rejected")
}
