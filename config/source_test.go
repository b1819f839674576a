package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

// TestSourceKinds: source.kind picks one entry of the kinds' table, whose
// section alone is checked; an unknown kind is one error listing the
// known kinds and naming the nearest, and takes nothing of any section.
func TestSourceKinds(t *testing.T) {
	require.Equal(t, []string{"file", "kafka", "postgres", "redis-streams"}, config.SourceKinds())

	c := config.Default()
	c.Source.Kind = "kafak"
	c.Source.Kafka.Brokers, c.Source.Kafka.Topics = []string{"k:9092"}, []string{"dbserver1.public.articles"}
	err := c.Validate(true)
	require.ErrorContains(t, err, `source.kind: "kafak" is not one of file, kafka, postgres, redis-streams; did you mean kafka?`)
	require.Nil(t, c.MonitorBrokers(), "an unknown kind reads no brokers")
	require.Equal(t, "", c.DeadLetterPath())

	c.Source.Kind = "postgres"
	err = c.Validate(true)
	require.ErrorContains(t, err, "source.postgres.url")
	require.NotContains(t, err.Error(), "source.kafka", "only the configured kind's section is checked")
	require.Nil(t, c.MonitorBrokers(), "a Postgres source has no brokers for the monitor's events")
	bc, err := c.BackfillSource([]string{"public.articles"}, "", false, false)
	require.NoError(t, err)
	require.Equal(t, "", bc.DebeziumServer, "the Postgres source's rows are not a Debezium connector's")

	c.Source.Kind = "kafka"
	require.NoError(t, c.Validate(true), "a complete Kafka section")
	require.Equal(t, []string{"k:9092"}, c.MonitorBrokers(), "the monitor's events go to the Kafka source's brokers")
	c.Monitor.Brokers = []string{"m:9092"}
	require.Equal(t, []string{"m:9092"}, c.MonitorBrokers(), "monitor.brokers wins")
	bc, err = c.BackfillSource([]string{"public.articles"}, "", false, false)
	require.NoError(t, err)
	require.Equal(t, "dbserver1", bc.DebeziumServer, "a backfill takes the connector's identity")

	c.Source.Kind = "file"
	err = c.Validate(true)
	require.ErrorContains(t, err, "source.file.path")
	require.NotContains(t, err.Error(), "source.kafka")

	c.Source.Kind = "redis-streams"
	err = c.Validate(true)
	require.ErrorContains(t, err, "source.redis_streams.url: set the Redis server Debezium Server writes to")
	require.ErrorContains(t, err, "source.redis_streams.streams: list the streams")
	require.NotContains(t, err.Error(), "source.kafka")
	require.Equal(t, "", c.DeadLetterPath(), "its dead letters are streams, not a file")
	c.Monitor.Brokers = nil
	require.Nil(t, c.MonitorBrokers(), "a Redis Streams source has no brokers for the monitor's events")
	c.Source.RedisStreams.URL = "redis://127.0.0.1:6379/0"
	c.Source.RedisStreams.Streams = []string{"dbserver1.public.articles", "dbserver1.public.pages"}
	c.Source.RedisStreams.Start = "oldest"
	require.ErrorContains(t, c.Validate(true), `source.redis_streams.start: "oldest" is not earliest or latest`)
	c.Source.RedisStreams.Start = "latest"
	require.NoError(t, c.Validate(true), "a complete Redis Streams section")
	bc, err = c.BackfillSource([]string{"public.articles"}, "", false, false)
	require.NoError(t, err)
	require.Equal(t, "dbserver1", bc.DebeziumServer, "a backfill takes the identity of the connector Debezium Server runs")
}

// TestRedisStreamsSection: source.redis_streams converts whole, its
// settings can come from RAGSYNC_* variables, and its URL's password is a
// secret the redactor masks.
func TestRedisStreamsSection(t *testing.T) {
	path := writeFile(t, `
source:
  kind: redis-streams
  redis_streams:
    url: redis://:hunter2@redis:6379/1
    streams: [dbserver1.public.articles]
    group: g
    consumer: pod-0
    max_poll_records: 7
    block: 2s
    claim_idle: 45s
    start: latest
    null_key: "nil"
    null_value: "nil"
`)
	t.Setenv("RAGSYNC_SOURCE_REDIS_STREAMS_GROUP", "from-env")
	c, err := config.Load(path, nil)
	require.NoError(t, err)
	require.NoError(t, c.Validate(true))
	r := c.RedisStreamsSource()
	require.Equal(t, "redis://:hunter2@redis:6379/1", r.URL)
	require.Equal(t, []string{"dbserver1.public.articles"}, r.Streams)
	require.Equal(t, "from-env", r.Group)
	require.Equal(t, "pod-0", r.Consumer)
	require.Equal(t, 7, r.MaxPollRecords)
	require.Equal(t, 2*time.Second, r.Block)
	require.Equal(t, 45*time.Second, r.ClaimIdle)
	require.Equal(t, "latest", r.Start)
	require.Equal(t, "nil", r.NullKey)
	require.Equal(t, "nil", r.NullValue)
	require.Contains(t, c.Secrets(), "hunter2")

	_, err = config.Load(writeFile(t, "source:\n  kind: redis-streams\n  redis_streams:\n    stream: [a]\n"), nil)
	require.ErrorContains(t, err, "did you mean streams?")
}

// TestSourceSectionsConvert: each transport's section converts into its
// room's configuration whole.
func TestSourceSectionsConvert(t *testing.T) {
	path := writeFile(t, `
source:
  kind: kafka
  kafka:
    brokers: [a:9092, b:9092]
    topics: [dbserver1.public.articles]
    group: g
    max_poll_records: 7
    max_poll_bytes: 1024
    fetch_max_bytes: 2048
    session_timeout: 11s
    revoke_timeout: 12s
  file:
    path: events.jsonl
    follow: true
`)
	c, err := config.Load(path, nil)
	require.NoError(t, err)
	k := c.KafkaSource()
	require.Equal(t, []string{"a:9092", "b:9092"}, k.Brokers)
	require.Equal(t, []string{"dbserver1.public.articles"}, k.Topics)
	require.Equal(t, "g", k.Group)
	require.Equal(t, 7, k.MaxPollRecords)
	require.Equal(t, 1024, k.MaxPollBytes)
	require.Equal(t, 2048, k.FetchMaxBytes)
	require.Equal(t, 11*time.Second, k.SessionTimeout)
	require.Equal(t, 12*time.Second, k.RevokeTimeout)
	f := c.FileSource()
	require.Equal(t, "events.jsonl", f.Path)
	require.True(t, f.Follow)
}

// source.kafka.registry is checked with the Kafka section: each problem
// names its setting and the fix; the password and token are secrets the
// redactor hides; environment variables reach it.
func TestKafkaRegistrySettings(t *testing.T) {
	c := config.Default()
	c.Source.Kind = "kafka"
	c.Source.Kafka.Brokers, c.Source.Kafka.Topics = []string{"k:9092"}, []string{"dbserver1.public.articles"}
	require.NoError(t, c.Validate(true), "no registry: JSON only")

	c.Source.Kafka.Registry = config.RegistryConfig{Username: "key", BearerToken: "tok", CertFile: "/nonexistent/cert.pem"}
	err := c.Validate(true)
	require.ErrorContains(t, err, "source.kafka.registry.url: set the schema registry's URL")
	require.ErrorContains(t, err, "set bearer_token or username/password, not both")
	require.ErrorContains(t, err, "basic auth needs both username and password")
	require.ErrorContains(t, err, "needs both cert_file and key_file")
	require.ErrorContains(t, err, "source.kafka.registry.cert_file:")

	c.Source.Kafka.Registry = config.RegistryConfig{URL: "schema-registry:8081"}
	require.ErrorContains(t, c.Validate(true), `"schema-registry:8081" is not an http(s) URL`)

	c.Source.Kafka.Registry = config.RegistryConfig{URL: "https://sr.example:8081", Username: "key", Password: "s3cr3t-registry-pass"}
	require.NoError(t, c.Validate(true))
	require.Contains(t, c.Secrets(), "s3cr3t-registry-pass")

	t.Setenv("RAGSYNC_SOURCE_KAFKA_REGISTRY_BEARER_TOKEN", "from-the-env")
	loaded, err := config.Load("", nil)
	require.NoError(t, err)
	require.Equal(t, "from-the-env", loaded.Source.Kafka.Registry.BearerToken)
}
