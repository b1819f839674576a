package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/service"
)

// TestConfigAndServiceKnowTheSameTransports: the configuration's table of
// source kinds (what it validates) and the service's table of transports
// (what serve and dlq open) name the same kinds, so a kind that validates
// always opens.
func TestConfigAndServiceKnowTheSameTransports(t *testing.T) {
	require.Equal(t, service.Transports(), config.SourceKinds())
}

// TestSourceConfigCarriesEverySection: serve and dlq get the source as
// one value with each transport's section converted whole, and the
// dead-letter location resolved.
func TestSourceConfigCarriesEverySection(t *testing.T) {
	var c Config
	c.Config = config.Default()
	c.Source.Kind = "postgres"
	c.Source.Kafka.Brokers, c.Source.Kafka.Group = []string{"k:9092"}, "g"
	c.Source.File.Path = "events.jsonl"
	c.Source.Postgres.URL, c.Source.Postgres.Slot = "postgres://app@db/app", "docs"
	c.Source.RedisStreams.URL, c.Source.RedisStreams.Streams = "redis://r:6379/0", []string{"dbserver1.public.articles"}
	c.DLQ.Topic = "dead"
	sc := c.sourceConfig()
	require.Equal(t, "postgres", sc.Kind)
	require.Equal(t, c.KafkaSource(), sc.Kafka)
	require.Equal(t, c.FileSource(), sc.File)
	require.Equal(t, c.RedisStreamsSource(), sc.RedisStreams)
	require.Equal(t, "postgres://app@db/app", sc.Postgres.URL)
	require.Equal(t, "docs", sc.Postgres.Slot)
	require.Equal(t, "ragsync-docs.dlq.jsonl", sc.DLQPath)
	require.Equal(t, "dead", sc.DLQTopic)
	require.Equal(t, version, sc.Version)
	full, err := c.serviceConfig()
	require.NoError(t, err)
	require.Equal(t, sc.DLQPath, full.Source.DLQPath, "serve's source is the same value")
}
