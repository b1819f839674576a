package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/fallback"
)

// DeadLetterConfig says where the configured source keeps its dead letters.
type DeadLetterConfig struct {
	// Kind is the source's kind: kafka (the default), file or postgres.
	Kind string
	// Path is the dead-letter file of a file or Postgres source, resolved
	// (dlq.path or its default).
	Path string
	// FilePath is source.file.path, where a file source's replay appends.
	FilePath string
	// Brokers and Topics are the Kafka source's; DLQTopic overrides the
	// "<topic>.ragsync-dlq" default of each topic.
	Brokers  []string
	Topics   []string
	DLQTopic string
}

// DeadLetters is one dead-letter store of the configured source: a Kafka
// topic or a file.
type DeadLetters struct {
	cdc.DeadLetterStore
	// Name is the topic or the file.
	Name string
	// Topic is whether a dead letter's position is a partition and offset
	// of a topic; otherwise its Offset is the file's line.
	Topic bool
	// Replayed says what a replay of n dead letters did: each transport
	// replays differently (back to the original topic, appended to the
	// source file, queued for serve's next start).
	Replayed func(n int) string
}

// OpenDeadLetters opens the configured source's dead-letter stores; action
// is the dlq command's (list, replay, purge), since only a replay needs the
// file source's own path. The returned function closes them.
func OpenDeadLetters(cfg DeadLetterConfig, action string) ([]DeadLetters, func(), error) {
	switch cfg.Kind {
	case "file":
		if cfg.FilePath == "" && cfg.Path == "" {
			return nil, nil, errors.New("dlq: source.file.path is empty; set it (or dlq.path) to find the file source's dead letters")
		}
		if action == "replay" && cfg.FilePath == "" {
			return nil, nil, errors.New("dlq replay: source.file.path is empty; set it to the file to replay into")
		}
		d := DeadLetters{DeadLetterStore: file.NewDeadLetterFile(cfg.Path, cfg.FilePath), Name: cfg.Path,
			Replayed: func(n int) string {
				return fmt.Sprintf("%s: replayed %d record(s) to the end of %s", cfg.Path, n, cfg.FilePath)
			}}
		return []DeadLetters{d}, func() {}, nil
	case "postgres":
		// Replay moves the dead letters to the replay file beside them,
		// which serve's Postgres source applies (each change at its own
		// version, so one a later change superseded is skipped) before it
		// streams, and then empties.
		st := pgrepl.DeadLetterFile(cfg.Path)
		d := DeadLetters{DeadLetterStore: st, Name: st.Path(),
			Replayed: func(n int) string {
				return fmt.Sprintf("%s: queued %d change(s) in %s; serve applies them when it next starts (restart it if it is running)", st.Path(), n, st.ReplayTo())
			}}
		return []DeadLetters{d}, func() {}, nil
	}
	if len(cfg.Brokers) == 0 {
		return nil, nil, errors.New("dlq: source.kafka.brokers is empty; the CDC dead letters live in Kafka (use --frontdoor for the query front door's)")
	}
	topics := []string{cfg.DLQTopic}
	if cfg.DLQTopic == "" {
		topics = topics[:0]
		for _, t := range cfg.Topics {
			topics = append(topics, t+kafka.DLQSuffix)
		}
	}
	if len(topics) == 0 {
		return nil, nil, errors.New("dlq: no dead-letter topic: set dlq.topic or source.kafka.topics")
	}
	// A plain client: the stores read without joining a group.
	cl, err := kafka.Dial(cfg.Brokers)
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: connect to %v: %w", cfg.Brokers, err)
	}
	stores := make([]DeadLetters, 0, len(topics))
	for _, t := range topics {
		stores = append(stores, DeadLetters{DeadLetterStore: kafka.NewDeadLetterTopic(cl, t, ""), Name: t, Topic: true,
			Replayed: func(n int) string { return fmt.Sprintf("%s: replayed %d record(s) to their original topics", t, n) }})
	}
	return stores, cl.Close, nil
}

// OpenFrontDoorAdmin opens the front door for its dead-letter commands
// only: it has no embedder or searcher, so it cannot Run. The returned
// function closes its Redis client.
func OpenFrontDoorAdmin(ctx context.Context, fcfg fallback.Config) (*fallback.FrontDoor, func(), error) {
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	fd, err := fallback.NewFrontDoor(fcfg, rdb, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return fd, func() { rdb.Close() }, nil
}
