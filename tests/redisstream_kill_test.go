package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/redistest"
)

// redisWorld is a stream under the test's own Redis key prefix, written as
// Debezium Server's Redis sink writes it, and read by serve processes.
type redisWorld struct {
	rdb    *redis.Client
	stream string
}

func newRedisWorld(t *testing.T, name string) *redisWorld {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	return &redisWorld{rdb: rdb, stream: prefix + ":" + name}
}

// add writes events in the sink's default (compact) format: one field per
// entry, the key, whose value is the record's value.
func (w *redisWorld) add(t *testing.T, events []article) {
	t.Helper()
	ctx := context.Background()
	for len(events) > 0 {
		n := min(len(events), 500)
		pipe := w.rdb.Pipeline()
		for _, a := range events[:n] {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: w.stream, Values: []any{a.key(), a.value()}})
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		events = events[n:]
	}
}

// source is the config's source section: group, and consumer when not
// empty (else serve names its consumer after host and pid, as a
// Deployment's pods would be).
func (w *redisWorld) source(group, consumer string) string {
	s := fmt.Sprintf("source:\n  kind: redis-streams\n  redis_streams:\n    url: %s\n    streams: [%q]\n    group: %s\n    max_poll_records: 100\n    block: 200ms\n    claim_idle: 1s\n",
		redistest.URL(), w.stream, group)
	if consumer != "" {
		s += "    consumer: " + consumer + "\n"
	}
	return s
}

// behind is what the group has not applied yet: entries not delivered
// (XINFO GROUPS lag) plus entries delivered and not acknowledged.
func (w *redisWorld) behind(t *testing.T, group string) int64 {
	t.Helper()
	gs, err := w.rdb.XInfoGroups(context.Background(), w.stream).Result()
	require.NoError(t, err)
	for _, g := range gs {
		if g.Name == group {
			require.GreaterOrEqual(t, g.Lag, int64(0), "Redis 7 reports the group's lag")
			return g.Lag + g.Pending
		}
	}
	n, err := w.rdb.XLen(context.Background(), w.stream).Result()
	require.NoError(t, err)
	return n // no group yet: everything is behind
}

// deadLetters is how many entries the stream's dead-letter stream holds.
func (w *redisWorld) deadLetters(t *testing.T) int64 {
	t.Helper()
	n, err := w.rdb.XLen(context.Background(), w.stream+".ragsync-dlq").Result()
	require.NoError(t, err)
	return n
}

// useSource writes e's config with source in front of the rest.
func useSource(t *testing.T, e *env, base []byte, source string) {
	t.Helper()
	require.NoError(t, os.WriteFile(e.cfg, append([]byte(source), base...), 0o644))
}

// TestRedisStreamKilledServeEndsLikeACleanRun SIGKILLs serve while it
// drains a Debezium Server stream, restarts it (under its host-and-pid
// consumer name, so the dead one's pending entries are taken over with
// XAUTOCLAIM after claim_idle, and under a fixed name, which re-reads its
// own pending entries at once), and compares the final index with a clean
// `serve --once` of the same events: equal, and nothing dead-lettered.
func TestRedisStreamKilledServeEndsLikeACleanRun(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test: needs Postgres and Redis; skipped under -short")
	}
	t.Parallel() // own schemas, key prefixes and groups
	events := faultHistory(11, 150, 1500)

	clean := newRedisWorld(t, "dbserver1.public.articles")
	clean.add(t, events)
	ce := newEnv(t, "")
	writeConfigSource(t, ce, clean.source("clean", ""))
	stats := ce.serveOnce()
	require.Zero(t, stats["dead_lettered"], "clean run: %v", stats)
	require.Equal(t, len(events), stats["applied"]+stats["stale"]+stats["duplicate"]+stats["skipped"], "--once read every entry: %v", stats)
	require.Zero(t, clean.behind(t, "clean"), "--once acknowledged everything it applied")
	want := snapshotIndex(t, ce.schema)

	w := newRedisWorld(t, "dbserver1.public.articles")
	w.add(t, events)
	e := newEnv(t, "")
	base, err := os.ReadFile(e.cfg)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(3, 3))
	kills, midStream := 0, 0
	for kills < 6 {
		consumer := ""
		if kills%2 == 1 {
			consumer = "pod-0"
		}
		useSource(t, e, base, w.source("kill", consumer))
		before := w.behind(t, "kill")
		p := e.startServe(fmt.Sprintf("serve-%d", kills))
		// Wait until this process has applied something (a new consumer
		// name first waits claim_idle for the entries the last one left
		// pending), then kill it after a random share (0-15%) of what is
		// left: a share, not a time, so the kill lands mid-stream on a
		// quiet machine and a busy one alike.
		for i := 0; i < 600 && w.behind(t, "kill") >= before && before > 0 && !p.exited(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		target := w.behind(t, "kill") * int64(85+r.IntN(16)) / 100
		for i := 0; i < 600 && w.behind(t, "kill") > target && !p.exited(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		require.False(t, p.exited(), "serve exited early")
		if left := w.behind(t, "kill"); left > 0 {
			t.Logf("kill %d (consumer %q) with %d entries left", kills, consumer, left)
			midStream++
		}
		kill(t, p)
		kills++
	}
	useSource(t, e, base, w.source("kill", ""))
	final := e.startServe("serve-final")
	deadline := time.Now().Add(2 * time.Minute)
	for w.behind(t, "kill") > 0 {
		require.True(t, time.Now().Before(deadline), "group still %d entries behind", w.behind(t, "kill"))
		require.False(t, final.exited(), "serve exited early")
		time.Sleep(100 * time.Millisecond)
	}
	stopServe(t, final)
	t.Logf("redis-streams kill: %d events, %d SIGKILLs (%d mid-stream)", len(events), kills, midStream)
	require.GreaterOrEqual(t, midStream, 3, "kills must land while work is in flight; raise the event count")
	require.Zero(t, w.deadLetters(t), "no dead letters")
	requireSameIndex(t, searchable(want), searchable(snapshotIndex(t, e.schema)))
}

// searchable is an index state without the chunks of deleted documents. A
// delete is soft: the document keeps the chunks of the text it held when the
// delete landed, which search never returns and purge removes. A stream's
// entries taken over from a dead consumer arrive after later ones, so an
// update can land after the delete that follows it (and is stale, fenced by
// the delete's version): the deleted document then keeps an earlier text's
// chunks than in a run that read the stream in order. Every document's
// version and liveness, and every live document's chunks, must still equal.
func searchable(state []string) []string {
	deleted := map[string]bool{}
	for _, l := range state {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "doc" && f[3] == "live=false" {
			deleted[f[1]] = true
		}
	}
	out := make([]string, 0, len(state))
	for _, l := range state {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "chunk" {
			id, _, _ := strings.Cut(f[1], "#")
			if deleted[id] {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}
