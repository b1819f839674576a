package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/cdc/registry"
	"github.com/ragsync/ragsync/internal/suggest"
)

// sourceKind is what the configuration knows of one source.kind: the
// checks of its section, where its dead letters are by default, and what
// else of the configuration follows from it. Nothing else in the package
// branches on the kind (the service has its own table of what a transport
// does at run time).
type sourceKind struct {
	// validate checks the kind's section, source.<kind>.
	validate func(c Config) []error
	// deadLetterPath is its dead-letter file, dlq.path or its default; nil
	// when its dead letters are not in a file.
	deadLetterPath func(c Config) string
	// brokers, when not nil, are the Kafka brokers it reads, where the
	// monitor's events go without monitor.brokers.
	brokers func(c Config) []string
	// debeziumServer, when not nil, is the Debezium connector (its
	// topic.prefix) whose events it applies, whose identity a backfill's
	// rows take.
	debeziumServer func(c Config) string
}

// sourceKinds are the kinds of source, by source.kind.
var sourceKinds = map[string]sourceKind{
	"kafka": {
		validate: func(c Config) []error {
			var errs []error
			if len(c.Source.Kafka.Brokers) == 0 {
				errs = append(errs, fmt.Errorf("source.kafka.brokers: list at least one broker, e.g. [localhost:9092]"))
			}
			if len(c.Source.Kafka.Topics) == 0 {
				errs = append(errs, fmt.Errorf("source.kafka.topics: list the Debezium topics, e.g. [dbserver1.public.articles]"))
			}
			return append(errs, c.Source.Kafka.Registry.validate()...)
		},
		brokers: func(c Config) []string { return c.Source.Kafka.Brokers },
		debeziumServer: func(c Config) string {
			if len(c.Source.Kafka.Topics) == 0 {
				return ""
			}
			server, _, _ := strings.Cut(c.Source.Kafka.Topics[0], ".")
			return server
		},
	},
	"file": {
		validate: func(c Config) []error {
			if c.Source.File.Path == "" {
				return []error{fmt.Errorf("source.file.path: set the JSON Lines file to replay")}
			}
			if err := checkEventsFile(c.Source.File.Path); err != nil {
				return []error{err}
			}
			return nil
		},
		// Beside the file it replays; none without either path.
		deadLetterPath: func(c Config) string {
			switch {
			case c.DLQ.Path != "":
				return filepath.Clean(c.DLQ.Path)
			case c.Source.File.Path == "":
				return ""
			}
			return filepath.Clean(c.Source.File.Path + ".dlq.jsonl")
		},
	},
	"redis-streams": {
		validate: func(c Config) []error {
			if err := c.RedisStreamsSource().Validate(); err != nil {
				return []error{err}
			}
			return nil
		},
		// Debezium Server names each stream after the record's
		// destination, the topic name "<topic.prefix>.<schema>.<table>".
		debeziumServer: func(c Config) string {
			if len(c.Source.RedisStreams.Streams) == 0 {
				return ""
			}
			server, _, _ := strings.Cut(c.Source.RedisStreams.Streams[0], ".")
			return server
		},
	},
	"postgres": {
		validate: func(c Config) []error { return c.ValidatePostgresSource() },
		// Named after its slot, in serve's working directory.
		deadLetterPath: func(c Config) string {
			if c.DLQ.Path != "" {
				return filepath.Clean(c.DLQ.Path)
			}
			slot := c.Source.Postgres.Slot
			if slot == "" {
				slot = "ragsync"
			}
			return "ragsync-" + slot + ".dlq.jsonl"
		},
	},
}

// SourceKinds are the known values of source.kind, sorted.
func SourceKinds() []string { return slices.Sorted(maps.Keys(sourceKinds)) }

// sourceKindOf is the kind source.kind names; an unknown one is an error
// that lists the known ones and names the nearest.
func (c Config) sourceKindOf() (sourceKind, error) {
	if k, ok := sourceKinds[c.Source.Kind]; ok {
		return k, nil
	}
	known := SourceKinds()
	err := fmt.Errorf("source.kind: %q is not one of %s", c.Source.Kind, strings.Join(known, ", "))
	if s := suggest.Nearest(c.Source.Kind, known); s != "" {
		err = fmt.Errorf("%w; did you mean %s?", err, s)
	}
	return sourceKind{}, err
}

// validateSource checks source.kind and the section of its kind.
func (c Config) validateSource() []error {
	k, err := c.sourceKindOf()
	if err != nil {
		return []error{err}
	}
	return k.validate(c)
}

// DeadLetterPath is the dead-letter file of a file or Postgres source:
// dlq.path, else "<source.file.path>.dlq.jsonl" for a file source and
// "ragsync-<slot>.dlq.jsonl" for a Postgres source; "" for a file source
// without either. A Kafka source's dead letters live in topics, and a
// Redis Streams source's in streams, so they have none.
func (c Config) DeadLetterPath() string {
	k, err := c.sourceKindOf()
	if err != nil || k.deadLetterPath == nil {
		return ""
	}
	return k.deadLetterPath(c)
}

// sourceBrokers are the Kafka brokers the source reads; none for a source
// that is not on Kafka.
func (c Config) sourceBrokers() []string {
	k, err := c.sourceKindOf()
	if err != nil || k.brokers == nil {
		return nil
	}
	return k.brokers(c)
}

// sourceDebeziumServer is the Debezium connector whose events the source
// applies; "" for a source that applies none.
func (c Config) sourceDebeziumServer() string {
	k, err := c.sourceKindOf()
	if err != nil || k.debeziumServer == nil {
		return ""
	}
	return k.debeziumServer(c)
}

// KafkaSource is the Kafka source's configuration, from source.kafka.
func (c Config) KafkaSource() kafka.Config {
	k := c.Source.Kafka
	return kafka.Config{Brokers: k.Brokers, Topics: k.Topics, Group: k.Group, MaxPollRecords: k.MaxPollRecords,
		MaxPollBytes: k.MaxPollBytes, FetchMaxBytes: k.FetchMaxBytes, SessionTimeout: k.SessionTimeout, RevokeTimeout: k.RevokeTimeout}
}

// SchemaRegistry is the schema registry's client configuration, from
// source.kafka.registry; its URL is empty when none is configured.
func (c Config) SchemaRegistry() registry.Config {
	r := c.Source.Kafka.Registry
	return registry.Config{URL: r.URL, Username: r.Username, Password: r.Password, BearerToken: r.BearerToken,
		CAFile: r.CAFile, CertFile: r.CertFile, KeyFile: r.KeyFile, InsecureSkipVerify: r.InsecureSkipVerify, Timeout: r.Timeout}
}

// RedisStreamsSource is the Redis Streams source's configuration, from
// source.redis_streams.
func (c Config) RedisStreamsSource() redisstream.Config {
	r := c.Source.RedisStreams
	return redisstream.Config{URL: r.URL, Streams: r.Streams, Group: r.Group, Consumer: r.Consumer, MaxPollRecords: r.MaxPollRecords,
		Block: r.Block, ClaimIdle: r.ClaimIdle, Start: r.Start, NullKey: r.NullKey, NullValue: r.NullValue}
}

// FileSource is the file source's configuration, from source.file.
func (c Config) FileSource() file.Config {
	return file.Config{Path: c.Source.File.Path, Follow: c.Source.File.Follow}
}
