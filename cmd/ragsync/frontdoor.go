package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// frontDoor holds the query front door and its Redis client.
type frontDoor struct {
	fd  *fallback.FrontDoor
	rdb *redis.Client
}

func (f *frontDoor) Close() { f.rdb.Close() }

// newFrontDoor connects to Redis and builds the front door over the store.
func newFrontDoor(ctx context.Context, cfg Config, emb embedder.Client, st *sink.Store, reg prometheus.Registerer, logger *slog.Logger) (*frontDoor, error) {
	fcfg := cfg.frontDoorConfig()
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return nil, err
	}
	fd, err := fallback.NewFrontDoor(fcfg, rdb, emb, st, reg, logger)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &frontDoor{fd: fd, rdb: rdb}, nil
}

// rebuildBloom refills the tenant and document Bloom filters and the front
// door's document map from every live document, streamed (not collected
// first: a large index would be held in memory, and writes between the
// collection and the swap were lost), so queries for unknown tenants or ids
// never reach Postgres.
func rebuildBloom(ctx context.Context, b *fallback.Bloom, st *sink.Store) (int, error) {
	n, err := b.Rebuild(ctx, func(add func(tenant, docID string) error) error {
		return st.EachLive(ctx, func(d sink.LiveDocument) error { return add(d.Tenant, d.ID) })
	})
	if err != nil {
		return n, fmt.Errorf("rebuild bloom filters: %w", err)
	}
	return n, nil
}

// frontDoorSink tells the front door what the sink changed (fallback.Changes):
// Bloom filters before each write, and after each commit the document map
// and the cache generation, so deleted and re-tenanted documents leave
// cached answers at once. Before the write: a failed Bloom add fails the
// upsert, which is retried, so a filter never misses a document in the
// index. After the commit: a failed record fails the call, which the
// pipeline retries (the sink answers the replay as Duplicate and the record
// is made then). It embeds the *sink.Store's whole pipeline.Sink interface,
// ChunkStore included, so wrapping hides no capability.
type frontDoorSink struct {
	pipeline.Sink
	changes *fallback.Changes
}

func (s frontDoorSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	id := d.ID
	if id == "" {
		id = sink.DocID(d.Table, d.Key)
	}
	if err := s.changes.Upserting(ctx, d.Tenant, id); err != nil {
		return sink.Outcome{}, err
	}
	out, err := s.Sink.Upsert(ctx, d)
	if err != nil || out.Stale {
		// A stale change's tenant is not the document's: record nothing.
		return out, err
	}
	return out, s.changes.Upserted(ctx, d.Tenant, id)
}

func (s frontDoorSink) Delete(ctx context.Context, table, key string, v cdc.Version, ts time.Time) (sink.Outcome, error) {
	out, err := s.Sink.Delete(ctx, table, key, v, ts)
	if err != nil || out.Stale {
		return out, err
	}
	return out, s.changes.Deleted(ctx, sink.DocID(table, key))
}

func (s frontDoorSink) Truncate(ctx context.Context, table string, v cdc.Version, ts time.Time) (int, error) {
	n, err := s.Sink.Truncate(ctx, table, v, ts)
	if err != nil {
		return n, err
	}
	return n, s.changes.Truncated(ctx, table)
}
