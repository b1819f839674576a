package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// The front door's change feed is the pipeline's observer: the Bloom
// filters before each write, the document map and the cache generation
// after each commit.
var _ pipeline.Observer = (*fallback.Changes)(nil)

// The store is the watermark requests with after wait for.
var _ fallback.Watermark = (*sink.Store)(nil)

// frontDoor holds the query front door and its Redis client.
type frontDoor struct {
	fd  *fallback.FrontDoor
	rdb *redis.Client
	cfg fallback.Config
}

func (f *frontDoor) Close() { f.rdb.Close() }

// newFrontDoor connects to Redis and builds the front door over the store.
func newFrontDoor(ctx context.Context, fcfg fallback.Config, emb embedder.Client, st *sink.Store, reg prometheus.Registerer, logger *slog.Logger) (*frontDoor, error) {
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return nil, err
	}
	fd, err := fallback.NewFrontDoor(fcfg, rdb, emb, st, reg, logger)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	// Requests with after wait for this index's watermark (one LISTEN
	// connection per process, outside the pool).
	fd.SetWatermark(st)
	return &frontDoor{fd: fd, rdb: rdb, cfg: fcfg}, nil
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

// RebuildBloom rebuilds the front door's Bloom filters and document map of
// ix from its live documents (ragsync bloom rebuild) and returns how many
// documents it read.
func RebuildBloom(ctx context.Context, fcfg fallback.Config, ix *Index, logger *slog.Logger) (int, error) {
	fd, err := newFrontDoor(ctx, fcfg, ix.Emb, ix.Store, prometheus.NewRegistry(), logger)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	return rebuildBloom(ctx, fd.fd.Bloom(), ix.Store)
}
