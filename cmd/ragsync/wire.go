package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// indexConfig is the index a command opens: index:, postgres: and the
// embedder's settings.
func (c Config) indexConfig() service.IndexConfig {
	return service.IndexConfig{URL: c.Postgres.URL, Schema: c.Postgres.Schema, Index: c.Index,
		Embedder: c.EmbedderConfig(), FullText: c.FullText(),
		Type: c.VectorType(), HNSW: c.SinkHNSW(), Candidates: c.HNSW.RerankCandidates}
}

// openIndex opens the configured index for writing (service.Open).
func openIndex(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*service.Index, error) {
	return service.Open(ctx, cfg.indexConfig(), sink.Write, logger, reg)
}

// openIndexRead opens the configured index for reading only
// (service.Open in sink.Read mode).
func openIndexRead(ctx context.Context, cfg Config, logger *slog.Logger) (*service.Index, error) {
	return service.Open(ctx, cfg.indexConfig(), sink.Read, logger, nil)
}

// sourceConfig is the configured source and where its dead letters are,
// for serve and the dlq command: each transport's section as its room's
// configuration; the service's transport table picks the one source.kind
// names.
func (c Config) sourceConfig() service.SourceConfig {
	return service.SourceConfig{
		Kind:         c.Source.Kind,
		File:         c.FileSource(),
		Kafka:        c.KafkaSource(),
		Registry:     c.SchemaRegistry(),
		Postgres:     c.PostgresSourceConfig(nil, nil, nil),
		RedisStreams: c.RedisStreamsSource(),
		DLQPath:      c.DeadLetterPath(),
		DLQTopic:     c.DLQ.Topic,
		Version:      version,
	}
}

// servicePipelineConfig is what every pipeline is built from.
func (c Config) servicePipelineConfig() service.PipelineConfig {
	pc := c.PipelineConfig(nil, nil)
	pc.Reuse = c.Reuse.Pipeline(c.Monitor, nil)
	return service.PipelineConfig{Pipeline: pc, Chunker: c.ChunkerConfig(), Decoder: c.DecoderConfig(), Debt: c.Reuse.Debt(nil)}
}

// monitorConfig is the monitor and where its events go.
func (c Config) monitorConfig() service.MonitorConfig {
	mc := service.MonitorConfig{Enabled: c.Monitor.On(), Config: c.Monitor, Brokers: c.MonitorBrokers(), DebtWindow: c.Reuse.RepayWindow}
	if url, stream, ok := c.MonitorRedis(); ok {
		mc.RedisURL, mc.Stream = url, stream
	}
	return mc
}

// serviceConfig is serve's configuration; the error is an invalid purge:
// section.
func (c Config) serviceConfig() (service.Config, error) {
	purge, err := c.Purge.Options()
	if err != nil {
		return service.Config{}, err
	}
	sc := service.Config{
		Index:         c.indexConfig(),
		Source:        c.sourceConfig(),
		Pipeline:      c.servicePipelineConfig(),
		Monitor:       c.monitorConfig(),
		Purge:         purge,
		PurgeInterval: c.Purge.Interval,
		IndexPoll:     c.IndexPoll,
		HTTPListen:    c.HTTP.Listen,
		Freshness:     service.FreshnessConfig{Target: c.Freshness.Target, DegradedAfter: c.Freshness.Degraded()},
	}
	if c.FrontDoor.Enabled {
		fc := c.FrontDoorConfig()
		sc.FrontDoor = &fc
	}
	return sc, nil
}

// loadValid loads the configuration and checks it; needSource also checks
// the source section, which only serve uses.
func (g *globals) loadValid(needSource bool) (Config, error) {
	cfg, err := g.load()
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(needSource); err != nil {
		return cfg, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}
