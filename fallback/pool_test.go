package fallback

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/redistest"
)

// TestNewFrontDoorRejectsASmallPool: with fewer connections than blocking
// readers plus room for their work, every connection ends up held by an
// XREADGROUP and a miss waits for one forever — the front door hung this
// way under GOMAXPROCS=1, where go-redis's default pool is 10. It must
// refuse to start and say what to change.
func TestNewFrontDoorRejectsASmallPool(t *testing.T) {
	cfg := testConfig("test:pool").WithDefaults()
	cfg.Workers = 8
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: 10})
	t.Cleanup(func() { _ = rdb.Close() })
	_, err := NewFrontDoor(cfg, rdb, &testEmbedder{}, &countingSearcher{}, nil, nil)
	require.ErrorContains(t, err, "pool has 10 connections, the front door needs at least 17")
	require.ErrorContains(t, err, "pool_size in frontdoor.redis_url")

	// A front door for DLQ operations only runs no readers.
	_, err = NewFrontDoor(cfg, rdb, nil, nil, nil, nil)
	require.NoError(t, err)
}

func TestOpenRedisPoolSize(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	ctx := context.Background()
	rdb, err := OpenRedis(ctx, redistest.URL())
	require.NoError(t, err)
	require.Equal(t, defaultPoolSize(), rdb.Options().PoolSize)
	require.GreaterOrEqual(t, rdb.Options().PoolSize, 64)
	require.NoError(t, rdb.Close())

	rdb, err = OpenRedis(ctx, redistest.URL()+"?pool_size=7")
	require.NoError(t, err, "a pool_size in the URL is the user's choice")
	require.Equal(t, 7, rdb.Options().PoolSize)
	require.NoError(t, rdb.Close())
}

// TestMissesAnsweredWithTheSmallestPool runs a front door on exactly the
// pool it accepts, with a block timeout longer than the test so the workers
// and the DLQ reader hold their connections throughout, and checks that
// concurrent misses are all answered from the headroom. (With a minimum of
// workers + 1 it fails: the misses time out waiting for a connection.)
func TestMissesAnsweredWithTheSmallestPool(t *testing.T) {
	b := setup(t, func(c *Config) { c.Workers = 8; c.BlockTimeout = 5 * time.Second })
	opts := b.rdb.Options()
	small := *opts
	small.PoolSize = minPoolSize(b.cfg.WithDefaults())
	rdb := redis.NewClient(&small)
	t.Cleanup(func() { _ = rdb.Close() })
	fd, err := NewFrontDoor(b.cfg, rdb, b.emb, b.searcher, nil, nil)
	require.NoError(t, err)
	run(t, fd)

	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := b.client.Search(ctx, Query{Text: fmt.Sprintf("pool starvation query %d about redis streams", i), K: 3})
			if err == nil && res.Status != StatusOK {
				err = fmt.Errorf("status %s: %s", res.Status, res.Reason)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 40, b.searcher.searches.Load(), "each distinct miss searched once")
}
