package fallback

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/redistest"
)

// Finding 11: the front door and its client work as a Redis ACL user that
// may touch only the prefix's keys.
func TestACLUserLimitedToThePrefix(t *testing.T) {
	b := setupTenants(t, nil)
	ctx := t.Context()
	user := "ragsync-test-" + strings.TrimPrefix(b.prefix, "test:")
	require.NoError(t, b.rdb.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">s3cret", "~"+b.prefix+":*", "+@all").Err())
	t.Cleanup(func() { _ = b.rdb.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	u, err := url.Parse(redistest.URL())
	require.NoError(t, err)
	u.User = url.UserPassword(user, "s3cret")
	rdb, err := OpenRedis(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	// The limit is real: a key outside the prefix is refused.
	require.ErrorContains(t, rdb.Set(ctx, "elsewhere:"+b.prefix, "x", time.Minute).Err(), "NOPERM")

	fd := serveAndAskTwice(t, b, rdb)
	// Writes that record index changes need no key outside the prefix either.
	require.NoError(t, fd.Changes().Deleted(ctx, "public.articles/1"))
	require.NoError(t, fd.Changes().Truncated(ctx, "public.other"))

	_, err = OpenRedis(ctx, strings.Replace(u.String(), "s3cret", "wrong", 1))
	require.ErrorContains(t, err, "check the user and password in frontdoor.redis_url")
}

func TestRedisURLForms(t *testing.T) {
	opts, err := redisOptions("rediss://ragsync:pw@redis.example:6380/2")
	require.NoError(t, err)
	require.NotNil(t, opts.TLSConfig, "rediss:// turns TLS on")
	require.Equal(t, "redis.example", opts.TLSConfig.ServerName)
	require.Equal(t, "ragsync", opts.Username)
	require.Equal(t, "pw", opts.Password)
	require.Equal(t, 2, opts.DB)

	opts, err = redisOptions("redis://127.0.0.1:6379/0")
	require.NoError(t, err)
	require.Nil(t, opts.TLSConfig)

	_, err = redisOptions("http://user:topsecret@host/0")
	require.ErrorContains(t, err, "frontdoor.redis_url")
	require.NotContains(t, err.Error(), "topsecret", "the password is not echoed")
}

// serveAndAskTwice runs a front door with b's settings over rdb and checks
// that one query is answered from a search, then from the cache. It returns
// the running front door.
func serveAndAskTwice(t *testing.T, b *bundle, rdb *redis.Client) *FrontDoor {
	t.Helper()
	fd, err := NewFrontDoor(b.cfg, rdb, b.emb, b.searcher, prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	rebuildBloomFromTestDocs(t, fd)
	run(t, fd)
	c := NewClient(rdb, b.prefix)
	t.Cleanup(func() { _ = c.Close() })
	for i, source := range []string{SourceSearch, SourceCache} {
		res, err := c.Search(t.Context(), Query{Text: "redis streams workers", K: 2, Tenant: "acme"})
		require.NoError(t, err)
		require.Equal(t, StatusOK, res.Status)
		if i == 0 && res.Source == SourceShared {
			// On a loaded machine the client's retry of a slow first
			// request joins the search already running for it: still a
			// search, not the cache.
			source = SourceShared
		}
		require.Equal(t, source, res.Source)
		require.NotEmpty(t, res.Hits)
	}
	return fd
}
