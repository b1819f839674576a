package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/cdc/registry"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

var (
	_ pipeline.Source = (*pgrepl.Source)(nil)
	_ pipeline.Source = (*redisstream.Source)(nil)
	// Every continuous source keeps a watermark for readers that wait for
	// their own writes.
	_ cdc.Watermarker      = (*pgrepl.Source)(nil)
	_ cdc.Watermarker      = (*redisstream.Source)(nil)
	_ cdc.Watermarker      = (*kafka.Source)(nil)
	_ cdc.Watermarker      = (*file.Source)(nil)
	_ pipeline.DeadLetters = (*redisstream.DeadLetters)(nil)
	_ monitor.LagSource    = (*redisstream.Source)(nil)
	_ prometheus.Collector = (*redisstream.LagCollector)(nil)
	_ pgrepl.State         = sourceState{}
	_ pgrepl.Index         = (*sink.Store)(nil)
)

// SourceConfig is the configured source of changes and where its dead
// letters go.
type SourceConfig struct {
	// Kind is the transport, one of Transports(): it picks which of
	// File, Kafka, Postgres and RedisStreams is used, and where DLQPath or
	// DLQTopic apply.
	Kind string
	// File is the file source (Path, Follow); its Decoder is set here.
	File file.Config
	// Kafka is the Kafka source; its Decoder, StopAtEnd and Logger are set
	// here.
	Kafka kafka.Config
	// Registry is the schema registry the Kafka source decodes Avro,
	// Protobuf and JSON Schema records through; none when its URL is empty.
	Registry registry.Config
	// Postgres is the logical-replication source; its State, Index,
	// StopAtEnd, DLQPath, Logger and Registerer are set here.
	Postgres pgrepl.Config
	// RedisStreams is the source of Debezium Server's Redis sink; its
	// Decoder, StopAtEnd and Logger are set here.
	RedisStreams redisstream.Config
	// DLQPath is the dead-letter file of the file and postgres sources,
	// resolved (dlq.path or its default); DLQTopic overrides the Kafka
	// source's "<topic>.ragsync-dlq" dead-letter topics.
	DLQPath, DLQTopic string
	// Version is ragsync's version, recorded in every dead letter.
	Version string
}

// source is a built source with what the rest of serve may use of it: a
// capability is a field set by the constructor that knows the transport,
// never discovered by type assertion.
type source struct {
	src   pipeline.Source
	dlq   pipeline.DeadLetters
	close func()
	// lag, when not nil, is the consumer lag the monitor reads (Kafka,
	// Redis Streams).
	lag monitor.LagSource
	// collector, when not nil, exports the lag as metrics (Kafka, Redis
	// Streams).
	collector prometheus.Collector
	// unhealthy, when not nil, names a problem of the source that /readyz
	// reports ("" when there is none: the Postgres slot).
	unhealthy func() string
	// abandon, when not nil, closes a source whose serve failed to start
	// and drops what its start created (the Postgres slot and publication,
	// which would hold WAL).
	abandon func()
}

// newSource builds the configured source and its dead-letter destination
// with its transport (transports). once stops it at the end of what it
// holds at start.
func newSource(ctx context.Context, cfg SourceConfig, decoder cdc.DecoderConfig, once bool, pool *pgxpool.Pool, st *sink.Store, reg prometheus.Registerer, logger *slog.Logger) (*source, error) {
	t, err := transportOf(cfg.Kind)
	if err != nil {
		return nil, err
	}
	return t.open(ctx, cfg, sourceEnv{decoder: decoder, once: once, pool: pool, store: st, reg: reg, logger: logger})
}

// SourceState is where the Postgres source records its finished initial
// loads and what it created: the index schema of pool.
func SourceState(pool *pgxpool.Pool) pgrepl.State { return sourceState{sink.NewSourceState(pool)} }

// sourceState adapts sink.SourceState to pgrepl.State.
type sourceState struct{ *sink.SourceState }

func (s sourceState) Load(ctx context.Context, slot string) (pgrepl.LoadRecord, error) {
	r, err := s.SourceState.Load(ctx, slot)
	return pgrepl.LoadRecord(r), err
}

func (s sourceState) Streams(ctx context.Context, database string) ([]pgrepl.Stream, error) {
	got, err := s.SourceState.Streams(ctx, database)
	out := make([]pgrepl.Stream, len(got))
	for i, g := range got {
		out[i] = pgrepl.Stream(g)
	}
	return out, err
}

func (s sourceState) SaveLoad(ctx context.Context, slot string, r pgrepl.LoadRecord) error {
	return s.SourceState.SaveLoad(ctx, slot, sink.SourceLoad(r))
}

// kafkaLag adapts the Kafka source to monitor.LagSource.
type kafkaLag struct {
	src    *kafka.Source
	topics []string
}

func (k kafkaLag) Lag(ctx context.Context) (map[string]map[int32]int64, error) { return k.src.Lag(ctx) }

func (k kafkaLag) Partitions(ctx context.Context) (int, error) {
	td, err := kadm.NewClient(k.src.Client()).ListTopics(ctx, k.topics...)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range td {
		if t.Err != nil {
			// An unknown topic would otherwise count as 0 partitions and
			// bound the recommended replicas to 1.
			return 0, fmt.Errorf("describe topic %s: %w", t.Topic, t.Err)
		}
		n += len(t.Partitions)
	}
	return n, nil
}
