package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/internal/redistest"
)

// frontDoorWorld runs serve in-process with the front door on, over a file
// source without follow, and returns its config path once the front door
// answers from the index. serve stops when the test ends.
func frontDoorWorld(t testing.TB) string {
	_, prefix := redistest.Client(t)
	w := newFileWorld(t, eventLines(t, article("c", 1, 10, bodyA), article("c", 2, 20, bodyB)), fmt.Sprintf(`frontdoor:
  enabled: true
  redis_url: %s
  prefix: %s
`, redistest.URL(), prefix))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := runCtx(ctx, "serve", "--config", w.cfg)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	// Both documents in the index first: an earlier query would cache an
	// empty answer for frontdoor.negative_ttl (30s).
	require.Eventually(t, func() bool { return countDocs(t, w.schema) == 2 }, 60*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		out, _, err := runCtx(t.Context(), "query", "--via", "redis", "--timeout", "2s", "--config", w.cfg, "tide pools")
		return err == nil && strings.Contains(out, "public.articles/1")
	}, 60*time.Second, 200*time.Millisecond)
	// The file is drained by now (both documents are indexed).
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("serve exited after draining the file although the front door is on: %v", err)
	default:
	}
	return w.cfg
}

// TestQueryViaRedisIsAsFastAsTheAnswer: a cache hit through the front door
// takes well under the ~1.1 s it took when the client's Close waited a full
// 1 s poll of its reader. The bound is generous for a shared machine; the
// median is in BenchmarkQueryViaRedisHit. Also: serve with a finite file
// source keeps the front door up after the file, a --filter key the front
// door refuses names frontdoor.allowed_filters, and --json carries table
// and key.
func TestQueryViaRedisIsAsFastAsTheAnswer(t *testing.T) {
	cfg := frontDoorWorld(t)
	var best time.Duration
	for range 3 {
		start := time.Now()
		out, _, err := runCtx(t.Context(), "query", "--via", "redis", "--config", cfg, "tide pools")
		d := time.Since(start)
		require.NoError(t, err)
		require.Contains(t, out, "cached true")
		if best == 0 || d < best {
			best = d
		}
	}
	require.Less(t, best, 500*time.Millisecond, "query --via redis on a cache hit")

	_, _, err := runCtx(t.Context(), "query", "--via", "redis", "--filter", "lang=en", "--config", cfg, "tide pools")
	require.ErrorContains(t, err, "--filter lang: the front door only accepts the keys in frontdoor.allowed_filters (now: doc_id, table)")

	out, _, err := runCtx(t.Context(), "query", "--via", "redis", "--json", "--config", cfg, "tide pools")
	require.NoError(t, err)
	require.Contains(t, out, `"table":"public.articles","key":"1"`)
}

// BenchmarkQueryViaRedisHit runs `ragsync query --via redis` in-process
// on a cache hit (config, connect, one client, one request, close — what
// the command does) and, interleaved in the same run, the answer alone: one
// Search of a long-lived client. It reports each one's median and their
// ratio; before the client's Close woke its reader the command took ~1 s
// (one full reader poll) more than the answer.
func BenchmarkQueryViaRedisHit(b *testing.B) {
	cfgPath := frontDoorWorld(b)
	g := &globals{configPath: cfgPath, red: redact.New()}
	cfg, err := g.loadValid(false)
	require.NoError(b, err)
	fcfg := cfg.FrontDoorConfig()
	rdb, err := fallback.OpenRedis(b.Context(), fcfg.RedisURL)
	require.NoError(b, err)
	defer rdb.Close()
	cl := fallback.NewClient(rdb, fcfg.Prefix)
	defer cl.Close()
	var cmdDs, answerDs []time.Duration
	for b.Loop() {
		start := time.Now()
		out, _, err := runCtx(b.Context(), "query", "--via", "redis", "--config", cfgPath, "tide pools")
		cmdDs = append(cmdDs, time.Since(start))
		if err != nil || !strings.Contains(out, "cached true") {
			b.Fatalf("not a cache hit: %v\n%s", err, out)
		}
		start = time.Now()
		res, err := cl.Search(b.Context(), fallback.Query{Text: "tide pools", K: 10, Filter: map[string]any{}})
		answerDs = append(answerDs, time.Since(start))
		if err != nil || !res.Cached {
			b.Fatalf("not a cache hit: %v %+v", err, res)
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	c, a := median(cmdDs), median(answerDs)
	b.ReportMetric(c, "cmd_median_ms")
	b.ReportMetric(a, "answer_median_ms")
	b.ReportMetric(c/a, "cmd/answer")
}
