package fallback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Connections killed under a running front door and client (a failover, a
// proxy restart, a server-side idle timeout) cost no request: the read
// loops and the sender hold connections of their own and replace them when
// they fail, as the pool would.
func TestKilledConnectionsAreReplaced(t *testing.T) {
	b := setup(t, nil)
	name := "kill-" + strings.NewReplacer(":", "-", " ", "-").Replace(b.prefix)
	opts := b.rdb.Options()
	opts.ClientName = name
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	fd, err := NewFrontDoor(b.cfg, rdb, b.emb, b.searcher, prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	run(t, fd)
	c := NewClient(rdb, b.prefix)
	c.Poll = 100 * time.Millisecond
	t.Cleanup(func() { _ = c.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = c.Search(ctx, Query{Text: "cosine search fast", K: 2})
	require.NoError(t, err)

	killed := killClients(t, b.rdb, name)
	// Two workers, the dead-letter reader, the client's sender and reader.
	require.GreaterOrEqual(t, killed, 5)

	for _, q := range []string{"cosine search fast", "bloom filters tenants"} { // a hit, then a miss
		r, err := c.Search(ctx, Query{Text: q, K: 2})
		require.NoError(t, err, q)
		require.Equal(t, StatusOK, r.Status, q)
	}
}

// killClients kills every connection named name and returns how many.
func killClients(t *testing.T, rdb *redis.Client, name string) int {
	t.Helper()
	list, err := rdb.ClientList(t.Context()).Result()
	require.NoError(t, err)
	n := 0
	for line := range strings.SplitSeq(list, "\n") {
		var id string
		named := false
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			switch {
			case k == "id":
				id = v
			case k == "name" && v == name:
				named = true
			}
		}
		if named && id != "" {
			require.NoError(t, rdb.ClientKillByFilter(t.Context(), "ID", id).Err())
			n++
		}
	}
	return n
}

// A request stream deleted under a running front door (by hand, or by a
// FLUSHDB) is recreated with its group, and requests sent after it are
// answered: a worker's read, alone or riding in a pipeline, gets NOGROUP and
// the loop makes the group again.
func TestDeletedRequestStreamIsRecreated(t *testing.T) {
	b := setup(t, nil)
	run(t, b.fd)
	_, err := b.search(t, Query{Text: "cosine search fast", K: 2})
	require.NoError(t, err)

	require.NoError(t, b.rdb.Del(t.Context(), b.fd.keys.requests()).Err())
	for _, q := range []string{"cosine search fast", "bloom filters tenants"} { // a hit, then a miss
		r, err := b.search(t, Query{Text: q, K: 2})
		require.NoError(t, err, q)
		require.Equal(t, StatusOK, r.Status, q)
	}
	groups, err := b.rdb.XInfoGroups(t.Context(), b.fd.keys.requests()).Result()
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, b.fd.cfg.Group, groups[0].Name)
}
