package config

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/pipeline"
)

// PipelineLimits are the pipeline's guards, inlined in
// `pipeline:`. Zero means the default.
type PipelineLimits struct {
	// DeadLetterWindow is how many of the latest messages the dead-letter
	// guard looks at; default 100.
	DeadLetterWindow int `yaml:"dead_letter_window"`
	// DeadLetterMaxRatio is the share of the window that may be
	// dead-lettered before serve stops (and /readyz fails); default 0.5,
	// 1 never stops.
	DeadLetterMaxRatio float64 `yaml:"dead_letter_max_ratio"`
	// MaxDocumentBytes bounds one document's text; a larger one is
	// dead-lettered with the reason. Default 8388608 (8 MiB).
	MaxDocumentBytes int `yaml:"max_document_bytes"`
	// EmbedSliceChunks is how many chunks of a document are embedded and
	// cached at a time; default 256.
	EmbedSliceChunks int `yaml:"embed_slice_chunks"`
	// MaxInFlightBytes and MaxInFlightDocuments bound the work fetched and
	// not yet applied; fetching waits while either is reached. The bytes
	// are an estimate of the memory held: the changes' bytes plus a cost
	// per document being applied (see pipeline.Config). Defaults 16777216
	// (16 MiB) and 256.
	MaxInFlightBytes     int `yaml:"max_in_flight_bytes"`
	MaxInFlightDocuments int `yaml:"max_in_flight_documents"`
}

// pipelineConfig is the pipeline's Config from `pipeline:` and `tables:`.
func (c Config) PipelineConfig(logger *slog.Logger, reg prometheus.Registerer) pipeline.Config {
	return pipeline.Config{
		Tables:     c.PipelineTables(),
		Workers:    c.Pipeline.Workers,
		StallAfter: c.Pipeline.StallAfter,
		Settings:   stallSettings(c),
		// StallLogInterval: 0 is the pipeline's default (30s).
		StallLogInterval:     c.Pipeline.StallLogInterval,
		DeadLetterWindow:     c.Pipeline.DeadLetterWindow,
		DeadLetterMaxRatio:   c.Pipeline.DeadLetterMaxRatio,
		MaxDocumentBytes:     c.Pipeline.MaxDocumentBytes,
		EmbedSliceChunks:     c.Pipeline.EmbedSliceChunks,
		MaxInFlightBytes:     c.Pipeline.MaxInFlightBytes,
		MaxInFlightDocuments: c.Pipeline.MaxInFlightDocuments,
		SourceName:           c.Source.Kind,
		IndexName:            c.Index,
		Logger:               logger,
		Registerer:           reg,
	}
}

// stallSettings names, per failing stage, what the stall summary tells the
// operator to check: the embedder's and the index's settings. The source's
// stages (its acknowledgements and its dead-letter destination) are advised
// by serve from its transport, which knows its own settings.
func stallSettings(cfg Config) map[string]string {
	m := map[string]string{
		pipeline.StageEmbedder: "embedder.base_url (is the embedding provider up and reachable?) and embedder.api_key",
		pipeline.StageSink:     "postgres.url (is Postgres up and reachable?)",
	}
	if cfg.Embedder.Provider == embedder.ProviderHashing {
		m[pipeline.StageEmbedder] = "embedder.provider (the offline embedder failed; see the error)"
	}
	return m
}
