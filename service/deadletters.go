package service

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/fallback"
)

// DeadLetters is one dead-letter store of the configured source: a Kafka
// topic, a Redis stream or a file.
type DeadLetters struct {
	cdc.DeadLetterStore
	// Name is the topic, the stream or the file.
	Name string
	// Topic is whether a dead letter's position is a partition and offset
	// of a topic; otherwise its Offset is the file's line.
	Topic bool
	// Stream is whether a dead letter's position is an entry of a Redis
	// stream: its Offset and OrigOffset are redisstream.Offset values,
	// which the operator reads as entry ids (redisstream.EntryID).
	Stream bool
	// Replayed says what a replay of n dead letters did: each transport
	// replays differently (back to the original topic, appended to the
	// source file, queued for serve's next start).
	Replayed func(n int) string
}

// OpenDeadLetters opens the configured source's dead-letter stores, as its
// transport keeps them (transports); action is the dlq command's (list,
// replay, purge), since only a replay needs the file source's own path.
// The returned function closes them.
func OpenDeadLetters(cfg SourceConfig, action string) ([]DeadLetters, func(), error) {
	t, err := transportOf(cfg.Kind)
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: %w", err)
	}
	return t.deadLetters(cfg, action)
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
