package tests

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFrontDoorEndToEnd runs serve with the front door enabled and queries
// it the way any client would: `ragsync query --via redis` speaks the Redis
// Stream protocol. An unknown tenant is answered from the Bloom filter.
func TestFrontDoorEndToEnd(t *testing.T) {
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events,
		article{op: "c", id: 1, lsn: 100, title: "Kayaking", body: body(kayak...), tenant: "acme"}.line(),
		article{op: "c", id: 2, lsn: 110, title: "Espresso", body: body(espresso...), tenant: "acme"}.line(),
	)
	prefix, _ := startFrontDoorServe(t, e, events, "e2e", "  workers: 2\n", "")

	// Wait until the documents are in the index, so the first front-door
	// query does not cache an empty answer (the negative cache would keep it
	// for negative_ttl).
	require.Eventually(t, func() bool {
		o, err := e.run(true, "query", "--tenant", "acme", "espresso grind size and water temperature")
		return err == nil && strings.Contains(o, "public.articles/2")
	}, 60*time.Second, 300*time.Millisecond)

	var out string
	require.Eventually(t, func() bool {
		o, err := e.run(true, "query", "--via", "redis", "--tenant", "acme", "--timeout", "3s", "espresso grind size and water temperature")
		out = o
		return err == nil && strings.Contains(o, "public.articles/2")
	}, 60*time.Second, 500*time.Millisecond, "front door never answered: %s", out)
	require.Contains(t, out, "status ok")

	// Asked again: the answer comes from the cache.
	out, _ = e.run(false, "query", "--via", "redis", "--tenant", "acme", "espresso grind size and water temperature")
	require.Contains(t, out, "cached true")

	// A tenant nobody has: empty, answered by the Bloom filter without a search.
	out, _ = e.run(false, "query", "--via", "redis", "--tenant", "nobody-"+prefix, "espresso")
	require.Contains(t, out, "source bloom")
	require.Contains(t, out, "no results")

	// An invalid request gets a clear error reply.
	_, err := e.run(true, "query", "--via", "redis", "--tenant", "acme", "-k", "500", "espresso")
	require.Error(t, err)
}

func redisURL() string {
	if u := strings.TrimSpace(getenv("TEST_REDIS_URL")); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}
