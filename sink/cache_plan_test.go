package sink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvector "github.com/pgvector/pgvector-go/pgx"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// planNode is the part of an EXPLAIN (ANALYZE, FORMAT JSON) node the test
// reads.
type planNode struct {
	NodeType      string     `json:"Node Type"`
	Relation      string     `json:"Relation Name"`
	ActualRows    float64    `json:"Actual Rows"`
	ActualLoops   float64    `json:"Actual Loops"`
	RemovedFilter float64    `json:"Rows Removed by Filter"`
	RemovedCheck  float64    `json:"Rows Removed by Index Recheck"`
	Plans         []planNode `json:"Plans"`
}

// cacheRowsRead sums, over the plan, the embedding_cache rows the executor
// looked at: those it returned and those it read and filtered away.
func cacheRowsRead(n planNode) float64 {
	var sum float64
	if n.Relation == "embedding_cache" {
		sum += (n.ActualRows + n.RemovedFilter + n.RemovedCheck) * max(n.ActualLoops, 1)
	}
	for _, c := range n.Plans {
		sum += cacheRowsRead(c)
	}
	return sum
}

// TestCacheReadsProbeByKey checks that the per-document reads of the
// embedding cache (Vectors, Cached, Lookup, their last-use touch,
// StoredChunks) look at a few
// rows per hash however large the cache is, under the plans that once made
// them scan the whole model's entries: generic plans over statistics taken
// before the cache grew. The plans come from auto_explain, reported to the
// client as notices, so the statements are exactly the ones the Store sends.
func TestCacheReadsProbeByKey(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()

	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["search_path"] = b.schema + ", public"
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	var (
		mu    sync.Mutex
		plans []string
	)
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if i := strings.Index(n.Message, "{"); i >= 0 && strings.HasPrefix(n.Message, "duration:") {
			mu.Lock()
			plans = append(plans, n.Message[i:])
			mu.Unlock()
		}
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, q := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
			"SET auto_explain.log_analyze = on", "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice"} {
			if _, err := c.Exec(ctx, q); err != nil {
				return err
			}
		}
		return pgxvector.RegisterTypes(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Skipf("auto_explain is not available on this server (%v); it ships with Postgres (contrib)", err)
	}
	s, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)

	out, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b", "c")))
	require.NoError(t, err)
	require.True(t, out.Applied)
	// 5,000 more entries of the same model, unused for two hours so the
	// touch has work to do, and no ANALYZE after them.
	_, err = b.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.embedding_cache (model, dimensions, content_hash, embedding, text, last_used_at)
		SELECT 'test-model', %d, md5(g::text), '[1,2,3,4]', 'filler', now() - interval '2 hours' FROM generate_series(1, 5000) g`, b.schema, dims))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.embedding_cache SET last_used_at = now() - interval '2 hours'`, b.schema))
	require.NoError(t, err)

	run := func(name string, f func() error) float64 {
		t.Helper()
		mu.Lock()
		plans = nil
		mu.Unlock()
		require.NoError(t, f(), name)
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, plans, "%s: auto_explain reported no plan", name)
		var rows float64
		for _, p := range plans {
			var e struct {
				Plan planNode `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal([]byte(p), &e), "%s: %s", name, p)
			rows += cacheRowsRead(e.Plan)
		}
		return rows
	}
	// Several calls each: the generic plan is forced, but the first
	// executions of a new prepared statement are where a custom plan
	// could differ.
	for range 3 {
		got := map[string][]float32{}
		rows := run("Vectors", func() (err error) {
			got, err = s.Vectors(ctx, []string{"a", "b", "c", "absent"})
			return err
		})
		require.Len(t, got, 3)
		// Read + touch: at most a probe per hash for each, plus the
		// touched rows re-found by the UPDATE.
		require.LessOrEqual(t, rows, float64(3*4), "Vectors read %v cache rows for 4 hashes of a 5,003-entry cache", rows)

		// Cached (every shadow write and every document too large for
		// one embedding slice asks it) and Lookup (every document) probe
		// and touch by key as well.
		var have map[string]bool
		rows = run("Cached", func() (err error) {
			have, err = s.Cached(ctx, []string{"a", "b", "c", "absent"})
			return err
		})
		require.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, have)
		require.LessOrEqual(t, rows, float64(3*4), "Cached read %v cache rows for 4 hashes of a 5,003-entry cache", rows)
		var l sink.Lookup
		rows = run("Lookup", func() (err error) {
			l, err = s.Lookup(ctx, sink.DocID("public.articles", "1"), []string{"a", "b", "c", "absent"})
			return err
		})
		require.True(t, l.Found)
		require.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, l.Cached)
		require.LessOrEqual(t, rows, float64(3*4+3), "Lookup read %v cache rows for 4 hashes and 3 chunks of a 5,003-entry cache", rows)

		var stored []sink.StoredChunk
		rows = run("StoredChunks", func() (err error) {
			stored, err = s.StoredChunks(ctx, sink.DocID("public.articles", "1"))
			return err
		})
		require.Len(t, stored, 3)
		for _, c := range stored {
			require.True(t, c.OriginCached, "chunk %s", c.Hash)
		}
		require.LessOrEqual(t, rows, float64(3), "StoredChunks read %v cache rows for 3 chunks", rows)
	}
	// A document whose chunks' vectors are all in the cache copies them
	// inside Postgres: its reads, locks and copy probe by key too.
	for v := range uint64(3) {
		rows := run("Upsert from the cache", func() error {
			cs := chunks("a", "b", "c")
			for i := range cs {
				cs[i].Vector = nil
			}
			out, err := s.Upsert(ctx, doc("2", v+1, cs))
			if err == nil && !out.Applied {
				err = fmt.Errorf("version %d not applied", v+1)
			}
			return err
		})
		require.LessOrEqual(t, rows, float64(4*3), "an upsert copying 3 cached vectors read %v cache rows of 5,003", rows)
	}
}
