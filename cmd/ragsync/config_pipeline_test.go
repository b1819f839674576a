package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/sink"
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
	cfg, err := loadConfig(path, []string{"pipeline.dead_letter_window=40"})
	require.NoError(t, err)
	require.NoError(t, cfg.validate(false))
	pc := cfg.pipelineConfig(nil, nil)
	require.Equal(t, 40, pc.DeadLetterWindow, "flags win")
	require.Equal(t, 0.2, pc.DeadLetterMaxRatio)
	require.Equal(t, 1<<20, pc.MaxDocumentBytes)
	require.Equal(t, 64, pc.EmbedSliceChunks)
	require.Equal(t, "public.*", pc.Tables[0].Match)

	t.Setenv("RAGSYNC_PIPELINE_MAX_DOCUMENT_BYTES", "2048")
	cfg, err = loadConfig(path, nil)
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
	cfg, err := loadConfig(path, nil)
	require.NoError(t, err)
	err = cfg.validate(false)
	require.ErrorContains(t, err, "pipeline.dead_letter_max_ratio")
	require.ErrorContains(t, err, "pipeline.max_document_bytes")
	require.ErrorContains(t, err, "tables[0].match", "a malformed glob is rejected")
}

func TestFatalCoversPostgres(t *testing.T) {
	lost := &sink.FatalError{Err: &pgconn.PgError{Code: "42501"}, Fix: "grant it back"}
	require.True(t, fatal(fmt.Errorf("upsert x: %w", lost)))
	require.False(t, transient(fmt.Errorf("upsert x: %w", lost)))
	require.False(t, fatal(&sink.DataError{Err: &pgconn.PgError{Code: "22021"}}))
	require.False(t, fatal(errors.New("other")))
	// A server that does not speak the configured encoding fails every
	// document: stop instead of dead-lettering them all.
	require.True(t, fatal(fmt.Errorf("embed: %w", &embedder.EncodingError{Model: "m", Err: errors.New("numbers")})))
}

// A reply that does not match its request is retried a bounded number of
// times and then dead-lettered, never retried for ever: a provider that
// answers one input badly must not stall the pipeline.
func TestBadReplyIsNotTransient(t *testing.T) {
	bad := fmt.Errorf("embed x: %w", &embedder.ResponseError{Model: "m", Reason: "1 vectors for 2 inputs"})
	require.False(t, transient(bad))
	require.False(t, fatal(bad))
	in := fmt.Errorf("embed x: %w", &embedder.InputError{Index: 3, Reason: "sent alone, the reply did not match it"})
	require.False(t, transient(in))
	require.False(t, fatal(in), "one input's fault dead-letters its document, it does not stop serve")
}
