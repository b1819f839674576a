package embedder_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/redact"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     embedder.Config
		wantErr []string
	}{
		{name: "hashing minimal", cfg: embedder.Config{Provider: "hashing", Dimensions: 64}},
		{name: "openai", cfg: embedder.Config{Provider: "openai", Model: "text-embedding-3-small", Dimensions: 1536, APIKey: "sk-x"}},
		{name: "ollama without key", cfg: embedder.Config{Provider: "openai", BaseURL: "http://localhost:11434/v1",
			Model: "nomic-embed-text", Dimensions: 768}},
		{name: "no provider", cfg: embedder.Config{Dimensions: 8},
			wantErr: []string{`embedder.provider: required, use "openai" or "hashing"`}},
		{name: "unknown provider", cfg: embedder.Config{Provider: "cohere", Dimensions: 8},
			wantErr: []string{`embedder.provider: "cohere" is not a provider`}},
		{name: "openai needs model and key", cfg: embedder.Config{Provider: "openai", Dimensions: 8},
			wantErr: []string{"embedder.model: required for provider openai",
				"embedder.api_key: required for api.openai.com, set OPENAI_API_KEY"}},
		{name: "bad url", cfg: embedder.Config{Provider: "openai", Model: "m", Dimensions: 8, BaseURL: "localhost:8080"},
			wantErr: []string{`embedder.base_url: "localhost:8080" is not an http(s) URL`}},
		{name: "azure needs endpoint", cfg: embedder.Config{Provider: "openai", APIType: "azure", Model: "m", Dimensions: 8, APIKey: "k"},
			wantErr: []string{"embedder.base_url: set it to your Azure OpenAI endpoint"}},
		{name: "bad api type", cfg: embedder.Config{Provider: "openai", APIType: "gcp", Model: "m", Dimensions: 8, APIKey: "k"},
			wantErr: []string{`embedder.api_type: "gcp" is not an API type`}},
		{name: "coalescing bounds", cfg: embedder.Config{Provider: "hashing", Dimensions: 8, Linger: -time.Millisecond, MaxRequestsInFlight: 1000},
			wantErr: []string{"embedder.linger: must be in (0, 10s], e.g. 20ms", "embedder.max_requests_in_flight: must be in 1..256, e.g. 32"}},
		{name: "hashing has one model", cfg: embedder.Config{Provider: "hashing", Model: "hashing-v2", Dimensions: 8},
			wantErr: []string{`embedder.model: provider hashing only has model "hashing-v1", got "hashing-v2"`}},
		{name: "every problem at once", cfg: embedder.Config{Provider: "hashing", Dimensions: -1, MaxBatchInputs: 5000,
			MaxBatchTokens: -1, Timeout: -time.Second},
			// No OpenAI model sizes for the offline embedder.
			wantErr: []string{"embedder.dimensions: must be > 0, got -1; the offline hashing embedder takes any size",
				"embedder.max_batch_inputs: must be in 1..2048, got 5000", "embedder.max_batch_tokens: must be > 0, got -1",
				"embedder.timeout: must be > 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.WithDefaults().Validate()
			c, newErr := embedder.New(tc.cfg)
			if len(tc.wantErr) == 0 {
				require.NoError(t, err)
				require.NoError(t, newErr)
				require.Equal(t, tc.cfg.Dimensions, c.Dimensions())
				return
			}
			require.Error(t, newErr)
			for _, w := range tc.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	got := embedder.Config{Provider: "hashing"}.WithDefaults()
	require.Equal(t, embedder.Config{Provider: "hashing", BaseURL: "https://api.openai.com/v1", APIType: "openai",
		Model: "hashing-v1", MaxBatchInputs: 256, MaxBatchTokens: 250000, Timeout: 60 * time.Second, MaxRetries: 5,
		MaxInputTokens: 8191, OnTooLong: "truncate", Linger: 20 * time.Millisecond, MaxRequestsInFlight: 32, EncodingFormat: "auto", SendDimensions: "auto",
		Batch: embedder.BatchConfig{PollInterval: 30 * time.Second, CompletionWindow: "24h", MaxRequestsPerFile: 50000,
			MaxInputsPerFile: 50000, MaxFileBytes: 200 << 20}}, got)
	require.Empty(t, embedder.Config{Provider: "openai"}.WithDefaults().Model, "openai has no default model")
	require.Equal(t, "2024-02-01", embedder.Config{APIType: "azure"}.WithDefaults().APIVersion)
}

func TestNewPicksProvider(t *testing.T) {
	t.Parallel()
	c, err := embedder.New(embedder.Config{Provider: "hashing", Dimensions: 32})
	require.NoError(t, err)
	require.IsType(t, &embedder.Hashing{}, c)
	c, err = embedder.New(embedder.Config{Provider: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "m", Dimensions: 32})
	require.NoError(t, err)
	require.IsType(t, &embedder.OpenAI{}, c)
	require.Equal(t, "m", c.Model())
}

func TestConfigRedactsKey(t *testing.T) {
	t.Parallel()
	cfg := embedder.Config{Provider: "openai", Model: "m", APIKey: "sk-secret-123"}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "embedder", cfg)
	require.NotContains(t, buf.String(), "sk-secret")
	require.Contains(t, buf.String(), redact.Mask)
	require.NotContains(t, fmt.Sprint(cfg), "sk-secret")
	require.NotContains(t, fmt.Sprintf("%+v", cfg), "sk-secret")
	require.Equal(t, "sk-secret-123", cfg.APIKey, "redaction must not modify the config")
}
