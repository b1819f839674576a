package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/vector"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// Search embeds text with the index's embedder and searches the index
// directly (query --via postgres), reading only.
func Search(ctx context.Context, cfg IndexConfig, text string, q sink.Query, logger *slog.Logger) ([]sink.Hit, error) {
	ix, err := Open(ctx, cfg, sink.Read, logger, nil)
	if err != nil {
		return nil, err
	}
	defer ix.Close()
	vecs, err := ix.Emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, fmt.Errorf("embed query: %w", err)
	}
	if why := vector.Unsearchable(vecs[0]); why != "" {
		return nil, fmt.Errorf("embed query: the query text embeds to %s; query with other words", why)
	}
	return ix.Store.Search(ctx, vecs[0], q)
}

// SearchFrontDoor sends q through the front door's Redis Stream protocol,
// exactly as any other client would, and waits at most timeout for the
// answer.
func SearchFrontDoor(ctx context.Context, fcfg fallback.Config, q fallback.Query, timeout time.Duration) (fallback.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return fallback.Result{}, err
	}
	defer rdb.Close()
	cl := fallback.NewClient(rdb, fcfg.Prefix)
	cl.ReplyPrefix = fcfg.ReplyPrefix
	defer cl.Close()
	res, err := cl.Search(ctx, q)
	if errors.Is(err, context.DeadlineExceeded) {
		return res, fmt.Errorf("no reply from the front door within %s: is `ragsync serve` running with frontdoor.enabled: true and the same frontdoor.prefix (%s)?", timeout, fcfg.Prefix)
	}
	return res, err
}

// OpenCatalog opens a pool on the index schema, migrated, and its catalog
// of indexes and aliases; the caller closes the pool.
func OpenCatalog(ctx context.Context, url, schema string) (*pgxpool.Pool, *sink.Catalog, error) {
	pool, err := sink.OpenPool(ctx, url, schema)
	if err != nil {
		return nil, nil, err
	}
	if err := migrations.Up(ctx, pool, schema, nil); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, sink.NewCatalog(pool, schema), nil
}

// OpenCatalogRead is OpenCatalog for a command that only reads: it checks
// the schema is migrated instead of migrating it, so it creates nothing
// and needs USAGE and SELECT only.
func OpenCatalogRead(ctx context.Context, url, schema string) (*pgxpool.Pool, *sink.Catalog, error) {
	pool, err := sink.OpenPool(ctx, url, schema)
	if err != nil {
		return nil, nil, err
	}
	if err := sink.CheckMigrated(ctx, pool, schema); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, sink.NewCatalog(pool, schema), nil
}

// BumpFrontDoorGeneration abandons the front door's cached answers (after
// an alias switch), waiting at most 5s for Redis.
func BumpFrontDoorGeneration(ctx context.Context, fcfg fallback.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rdb, err := fallback.OpenRedis(ctx, fcfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	_, err = fallback.BumpGeneration(ctx, rdb, fcfg.Prefix, fcfg.Index)
	return err
}

// WaitAfter waits until the configured index's watermark passes a (see
// sink.Store.WaitAfter), reading only: nil once it has, a
// *sink.NotYetError when it has not within timeout (0: check once). An
// alias waits for its target, the index a search reads.
func WaitAfter(ctx context.Context, cfg IndexConfig, a cdc.After, timeout time.Duration, logger *slog.Logger) error {
	ix, err := Open(ctx, cfg, sink.Read, logger, nil)
	if err != nil {
		return err
	}
	defer ix.Close()
	return ix.Store.WaitAfter(ctx, a, timeout)
}
