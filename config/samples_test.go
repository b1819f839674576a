package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

// TestSampleConfigsLoad: the sample configs users start from (README
// "Configuration") load without warnings and validate, with their source.
func TestSampleConfigsLoad(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("SOURCE_URL", "postgres://app@db:5432/app")
	events := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(events, nil, 0o644))
	tests := []struct {
		path     string
		sets     []string
		provider string
		kind     string
	}{
		// The file start's relative events.jsonl is the user's; point it at one that exists.
		{filepath.Join("..", "examples", "config", "file-offline.yaml"), []string{"source.file.path=" + events}, "hashing", "file"},
		{filepath.Join("..", "examples", "config", "kafka-openai.yaml"), nil, "openai", "kafka"},
		{filepath.Join("..", "compose", "ragsync.yaml"), nil, "openai", "kafka"},
		{filepath.Join("..", "compose", "ragsync-avro.yaml"), nil, "openai", "kafka"},
		{filepath.Join("..", "examples", "config", "postgres-direct.yaml"), nil, "hashing", "postgres"},
		{filepath.Join("..", "examples", "config", "redis-streams.yaml"), nil, "hashing", "redis-streams"},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			cfg, err := config.Load(tc.path, tc.sets)
			require.NoError(t, err)
			require.NoError(t, cfg.Validate(true))
			require.Empty(t, cfg.Warnings())
			require.Equal(t, tc.provider, cfg.Embedder.Provider)
			require.Equal(t, tc.kind, cfg.Source.Kind)
		})
	}
}
