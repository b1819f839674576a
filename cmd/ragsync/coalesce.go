package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/embedder"
)

// pipelineEmbedder is the embedder every pipeline calls (serve, backfill,
// reindex): for a remote provider a Coalescer, so that the chunks of the
// documents in flight share requests (a 3,000-row backfill costs about one
// request per max_batch_inputs texts, not one per row); queries keep the
// plain client, which must not linger. The offline embedder has nothing to
// share. stop closes the Coalescer once the pipeline has stopped. reg, when
// not nil, receives the coalescer's metrics. keep, when not nil, receives
// every answer as it arrives (embedder.CoalesceConfig.Keep).
func pipelineEmbedder(cfg Config, emb embedder.Client, reg prometheus.Registerer, keep func(context.Context, []string, [][]float32) error) (embedder.Client, func(), error) {
	if cfg.embedderConfig().Provider != embedder.ProviderOpenAI {
		return emb, func() {}, nil
	}
	cc := cfg.embedderConfig().Coalesce()
	cc.Keep = keep
	co := embedder.NewCoalescer(emb, cc)
	if reg != nil {
		if err := embedder.RegisterCoalescerMetrics(reg, co); err != nil {
			co.Close()
			return nil, nil, err
		}
	}
	return co, co.Close, nil
}
