package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/embedder"
)

// defaultRemoteWorkers is pipeline.workers when the provider is remote: the
// documents in flight are what the coalescer can put in one request, and
// against a provider at 150 ms a request, 4 documents in flight cap a load
// at ~27 documents/s whatever the machine (issue 15). Documents wait for
// Postgres connections after their vectors, so more workers than
// connections is cheap.
const defaultRemoteWorkers = 32

// pipelineWorkers is pipeline.workers, or its default: 4 for the offline
// hashing embedder (CPU-bound, nothing to wait for), defaultRemoteWorkers
// for provider openai.
func (c Config) pipelineWorkers() int {
	if c.Pipeline.Workers > 0 {
		return c.Pipeline.Workers
	}
	if c.embedderConfig().Provider == embedder.ProviderOpenAI {
		return defaultRemoteWorkers
	}
	return 4
}

// pipelineEmbedder is the embedder serve's pipeline calls. For a remote
// provider it is a Coalescer, so that the chunks of documents in flight
// share requests; queries keep the plain client, which must not linger.
// stop closes the Coalescer once the pipeline has stopped.
func pipelineEmbedder(cfg Config, emb embedder.Client, reg prometheus.Registerer) (embedder.Client, func(), error) {
	if _, ok := emb.(*embedder.OpenAI); !ok {
		return emb, func() {}, nil
	}
	co := embedder.NewCoalescer(emb, cfg.embedderConfig().Coalesce())
	if reg != nil {
		if err := embedder.RegisterCoalescerMetrics(reg, co); err != nil {
			co.Close()
			return nil, nil, err
		}
	}
	return co, co.Close, nil
}
