package embedder

import (
	"fmt"
	"time"
)

// OpenAI's limits for one batch input file of embeddings requests.
const (
	maxBatchFileRequests = 50_000
	maxBatchFileInputs   = 50_000
	maxBatchFileBytes    = 200 << 20
)

// BatchConfig is embedder.batch: the optional batch lane, where reindex
// and backfill send the texts they embed through the provider's
// asynchronous Batch API (half the online price, done within
// CompletionWindow) before their normal pass, which then finds every
// vector in the embedding cache.
type BatchConfig struct {
	// Enabled turns the batch lane on for reindex and backfill (their
	// --batch flag does too). Provider openai with api_type openai only.
	// Defaults to false.
	Enabled bool `yaml:"enabled"`
	// PollInterval is how often the state of submitted batches is asked.
	// Defaults to 30s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// CompletionWindow is the time the provider has to finish a batch;
	// OpenAI accepts only "24h". Defaults to "24h".
	CompletionWindow string `yaml:"completion_window"`
	// MaxRequestsPerFile caps the request lines of one batch input file
	// (each line one request of up to embedder.max_batch_inputs texts).
	// OpenAI allows 50,000. Defaults to 50000.
	MaxRequestsPerFile int `yaml:"max_requests_per_file"`
	// MaxInputsPerFile caps the texts of one batch input file, over all
	// its lines: OpenAI allows 50,000 embedding inputs per batch. Defaults
	// to 50000.
	MaxInputsPerFile int `yaml:"max_inputs_per_file"`
	// MaxFileBytes caps the size of one batch input file. OpenAI allows
	// 200 MB. Defaults to 209715200 (200 MiB).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.PollInterval == 0 {
		c.PollInterval = 30 * time.Second
	}
	if c.CompletionWindow == "" {
		c.CompletionWindow = "24h"
	}
	if c.MaxRequestsPerFile == 0 {
		c.MaxRequestsPerFile = maxBatchFileRequests
	}
	if c.MaxInputsPerFile == 0 {
		c.MaxInputsPerFile = maxBatchFileInputs
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = maxBatchFileBytes
	}
	return c
}

// validate reports c's problems, each naming its yaml path; c is the
// embedder's, whose provider and api type the lane needs.
func (c BatchConfig) validate(e Config) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Enabled {
		switch {
		case e.Provider != ProviderOpenAI:
			add("embedder.batch.enabled: the batch lane needs provider %q (a provider's Batch API), got %q; set embedder.batch.enabled: false (or leave out --batch)", ProviderOpenAI, e.Provider)
		case e.APIType == APITypeAzure:
			add("embedder.batch.enabled: api_type azure is not supported by the batch lane (Azure's Batch API needs a global-batch deployment and its own file endpoints); set embedder.batch.enabled: false (or leave out --batch)")
		}
	}
	if c.PollInterval <= 0 {
		add("embedder.batch.poll_interval: must be > 0, e.g. 30s, got %s", c.PollInterval)
	}
	if c.CompletionWindow != "24h" {
		add("embedder.batch.completion_window: %q is not a window the Batch API accepts, use \"24h\"", c.CompletionWindow)
	}
	if c.MaxRequestsPerFile < 1 || c.MaxRequestsPerFile > maxBatchFileRequests {
		add("embedder.batch.max_requests_per_file: must be in 1..%d (OpenAI's limit), got %d", maxBatchFileRequests, c.MaxRequestsPerFile)
	}
	if c.MaxInputsPerFile < 1 || c.MaxInputsPerFile > maxBatchFileInputs {
		add("embedder.batch.max_inputs_per_file: must be in 1..%d (OpenAI's limit of embedding inputs per batch), got %d", maxBatchFileInputs, c.MaxInputsPerFile)
	}
	if c.MaxFileBytes < 1<<20 || c.MaxFileBytes > maxBatchFileBytes {
		add("embedder.batch.max_file_bytes: must be in 1048576..%d (OpenAI's 200 MB), got %d", maxBatchFileBytes, c.MaxFileBytes)
	}
	return errs
}
