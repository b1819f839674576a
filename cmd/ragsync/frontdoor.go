package main

import (
	"context"
	"fmt"
	"iter"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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

// rebuildBloom refills the tenant and document Bloom filters from every live
// document, so queries for unknown tenants or ids never reach Postgres.
func rebuildBloom(ctx context.Context, b *fallback.Bloom, st *sink.Store) (int, error) {
	var docs []sink.LiveDocument
	if err := st.EachLive(ctx, func(d sink.LiveDocument) error { docs = append(docs, d); return nil }); err != nil {
		return 0, err
	}
	var seq iter.Seq2[string, string] = func(yield func(string, string) bool) {
		for _, d := range docs {
			if !yield(d.Tenant, d.ID) {
				return
			}
		}
	}
	n, err := b.Rebuild(ctx, seq)
	if err != nil {
		return n, fmt.Errorf("rebuild bloom filters: %w", err)
	}
	return n, nil
}

// bloomSink adds every upserted document's tenant and id to the front
// door's Bloom filters before writing it. Before, not after: a failed Add
// then fails the upsert, which is retried, so a filter can never miss a
// document that is in the index (a false "unknown tenant" would hide real
// results); an Add for a write that then fails only costs a false positive.
type bloomSink struct {
	pipeline.Sink
	bloom *fallback.Bloom
}

func (b bloomSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	id := d.ID
	if id == "" {
		id = sink.DocID(d.Table, d.Key)
	}
	if err := b.bloom.Add(ctx, fallback.KindDoc, id); err != nil {
		return sink.Outcome{}, err
	}
	if d.Tenant != "" {
		if err := b.bloom.Add(ctx, fallback.KindTenant, d.Tenant); err != nil {
			return sink.Outcome{}, err
		}
	}
	return b.Sink.Upsert(ctx, d)
}
