package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/config"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ragsync.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestLoadConfigPrecedence(t *testing.T) {
	path := writeFile(t, `
source:
  kind: file
  file:
    path: events.jsonl
embedder:
  provider: openai
  model: text-embedding-3-small
  dimensions: 1536
  api_key: ${TEST_RAGSYNC_KEY}
  timeout: 10s
index: from_file
postgres:
  url: ${TEST_RAGSYNC_PG:-postgres://fallback/db}
`)
	t.Setenv("TEST_RAGSYNC_KEY", "sk-secret")
	t.Setenv("RAGSYNC_INDEX", "from_env")
	t.Setenv("RAGSYNC_EMBEDDER_MAX_BATCH_TOKENS", "1000")
	t.Setenv("RAGSYNC_SOURCE_KAFKA_BROKERS", "a:9092, b:9092")
	t.Setenv("RAGSYNC_FRONTDOOR_REDIS_URL", "redis://r:6379/1")

	cfg, err := config.Load(path, []string{"embedder.dimensions=512"})
	require.NoError(t, err)
	require.Equal(t, "sk-secret", cfg.Embedder.APIKey, "${VAR} expands")
	require.Equal(t, "postgres://fallback/db", cfg.Postgres.URL, "${VAR:-default} falls back")
	require.Equal(t, "from_env", cfg.Index, "env beats file")
	require.Equal(t, 512, cfg.Embedder.Dimensions, "flags beat file")
	require.Equal(t, 1000, cfg.Embedder.MaxBatchTokens, "underscored env names resolve greedily")
	require.Equal(t, []string{"a:9092", "b:9092"}, cfg.Source.Kafka.Brokers)
	require.Equal(t, "redis://r:6379/1", cfg.FrontDoor.RedisURL, "inlined front-door settings resolve")
	require.Equal(t, 10*time.Second, cfg.Embedder.Timeout)
	require.Equal(t, 512, cfg.Chunker.TargetTokens, "defaults stay where nothing is set")

	t.Setenv("RAGSYNC_INDEX", "from_env")
	cfg, err = config.Load(path, []string{"index=from_flag"})
	require.NoError(t, err)
	require.Equal(t, "from_flag", cfg.Index, "flags beat env")
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		sets    []string
		wantErr string
	}{
		{name: "unknown field", file: "embeder:\n  model: x\n", wantErr: "embeder (line 1): unknown setting"},
		{name: "bad set syntax", sets: []string{"index"}, wantErr: "want path=value"},
		{name: "unknown set path", sets: []string{"embedder.modle=x"}, wantErr: `unknown setting "embedder.modle"; did you mean embedder.model?`},
		{name: "bad int", sets: []string{"chunker.target_tokens=lots"}, wantErr: "want an integer"},
		{name: "bad duration", sets: []string{"embedder.timeout=10"}, wantErr: "want a duration"},
		{name: "missing file", wantErr: "pass --config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "missing.yaml")
			if tc.file != "" || tc.name != "missing file" {
				path = writeFile(t, tc.file)
			}
			_, err := config.Load(path, tc.sets)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestValidateFields(t *testing.T) {
	cfg := config.Default()
	cfg.Tables = []config.TableConfig{{Match: "public.articles", Metadata: []string{"tag"},
		Fields: map[string]string{"tag": "{{a}}", "bad-name": "x", "two": "{{a}}\n{{b}}", "semantic_tag": "{{category}}"}}}
	err := cfg.Validate(false)
	require.Error(t, err)
	require.ErrorContains(t, err, "tables[0].fields.tag: the name is also in tables[0].metadata")
	require.ErrorContains(t, err, "tables[0].fields.bad-name: a field name is letters")
	require.ErrorContains(t, err, "tables[0].fields.two: a field template is one line")
	require.NotContains(t, err.Error(), "semantic_tag")
	cfg.Tables[0].Fields = map[string]string{"semantic_tag": "{{category}}", "origin": "cms"}
	require.NoError(t, cfg.Validate(false))
}

func TestValidateReportsEveryProblemWithItsPath(t *testing.T) {
	cfg := config.Default()
	cfg.Source.Kind = "ftp"
	cfg.Index = "Bad-Name"
	cfg.Tables = []config.TableConfig{{Match: "", Text: "no placeholders"}}
	cfg.Embedder.Dimensions = 0
	cfg.Log.Level = "loud"
	cfg.IndexPoll = -time.Second
	err := cfg.Validate(true)
	require.Error(t, err)
	for _, want := range []string{"source.kind", "index:", "index_poll:", "tables[0].match", "tables[0].text", "embedder.dimensions", "log.level"} {
		require.ErrorContains(t, err, want)
	}
	require.NoError(t, config.Default().Validate(false), "the defaults are valid without a source")
}

// The compose stack's config must stay loadable and valid as the config
// grows; nothing else would notice until someone runs docker compose up.
func TestComposeConfigIsValid(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	cfg, err := config.Load(filepath.Join("..", "compose", "ragsync.yaml"), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(true))
	require.True(t, cfg.FrontDoor.Enabled)
	require.Equal(t, "sk-test", cfg.Embedder.APIKey)
}

func TestSetOptionalAndFloatSettings(t *testing.T) {
	cfg, err := config.Load("", []string{"reuse.min_similarity=0.95", "reuse.enabled=false"})
	require.NoError(t, err)
	require.NotNil(t, cfg.Reuse.MinSimilarity)
	require.InDelta(t, 0.95, *cfg.Reuse.MinSimilarity, 1e-9)
	require.NotNil(t, cfg.Reuse.Enabled)
	require.False(t, *cfg.Reuse.Enabled)
	require.True(t, cfg.Reuse.Pipeline(cfg.Monitor, nil).Disabled)
	_, err = config.Load("", []string{"reuse.min_similarity=high"})
	require.ErrorContains(t, err, "want a number")
}

func TestValidateCoversReuseAndPurge(t *testing.T) {
	cfg := config.Default()
	bad := 1.5
	cfg.Reuse.MinSimilarity = &bad
	cfg.Purge.Interval = -time.Second
	err := cfg.Validate(false)
	require.ErrorContains(t, err, "min_similarity")
	require.ErrorContains(t, err, "purge.interval")
}

// TestDeadLetterPath pins where each source's dead-letter file is: dlq.path
// when set, else beside the file source's input, else named after the
// Postgres source's slot; a Kafka source's live in topics.
func TestDeadLetterPath(t *testing.T) {
	var c config.Config
	c.Source.Kind = "file"
	c.Source.File.Path = "in/./events.jsonl"
	require.Equal(t, "in/events.jsonl.dlq.jsonl", c.DeadLetterPath())
	c.DLQ.Path = "dead//letters.jsonl"
	require.Equal(t, "dead/letters.jsonl", c.DeadLetterPath())
	c.DLQ.Path, c.Source.File.Path = "", ""
	require.Equal(t, "", c.DeadLetterPath(), "a file source with neither path has none")
	c.Source.Kind = "postgres"
	require.Equal(t, "ragsync-ragsync.dlq.jsonl", c.DeadLetterPath())
	c.Source.Postgres.Slot = "docs"
	require.Equal(t, "ragsync-docs.dlq.jsonl", c.DeadLetterPath())
	c.Source.Kind = "kafka"
	c.DLQ.Path = "ignored.jsonl"
	require.Equal(t, "", c.DeadLetterPath())
}

// chunker.refine_target_tokens reaches the chunker: off where it is unset
// or -1, a size where set, and a size not below target_tokens refused with
// its path.
func TestChunkerRefineTargetTokens(t *testing.T) {
	cfg := config.Default()
	require.Equal(t, chunker.RefineOff, cfg.ChunkerConfig().RefineTargetTokens)
	path := writeFile(t, "chunker:\n  refine_target_tokens: -1\n")
	cfg, err := config.Load(path, nil)
	require.NoError(t, err)
	require.Equal(t, chunker.RefineOff, cfg.ChunkerConfig().RefineTargetTokens)
	cfg, err = config.Load(path, []string{"chunker.refine_target_tokens=96"})
	require.NoError(t, err)
	require.Equal(t, 96, cfg.ChunkerConfig().RefineTargetTokens)
	cfg.Chunker.RefineTargetTokens = 600
	require.ErrorContains(t, cfg.Validate(false), "chunker.refine_target_tokens: must be below target_tokens (512)")
}

// The provider budget lives in the front door's Redis unless
// embedder.budget.redis_url names another, and its errors carry their
// path through the whole config's validation.
func TestEmbedderBudgetDefaultsToTheFrontDoorsRedis(t *testing.T) {
	cfg := config.Default()
	require.Empty(t, cfg.EmbedderConfig().Budget.RedisURL, "no Redis configured: per-process limits")
	cfg.FrontDoor.RedisURL = "redis://:pw@redis:6379/1"
	require.Equal(t, "redis://:pw@redis:6379/1", cfg.EmbedderConfig().Budget.RedisURL)
	require.Contains(t, cfg.Secrets(), "pw")
	cfg.Embedder.Budget.RedisURL = "redis://budget:6379/0"
	require.Equal(t, "redis://budget:6379/0", cfg.EmbedderConfig().Budget.RedisURL, "an explicit budget Redis wins")
	cfg.Embedder.Budget.MaxConcurrency = -2
	cfg.Embedder.Budget.Shares.Backfill = 2
	err := cfg.Validate(false)
	require.ErrorContains(t, err, "embedder.budget.max_concurrency: must be >= 0")
	require.ErrorContains(t, err, "embedder.budget.shares.backfill: must be in (0, 1]")
}
