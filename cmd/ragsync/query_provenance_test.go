package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/internal/redistest"
)

// taggedArticle is a Debezium change of public.articles from connector
// "shop" on database "appdb", with a category column.
func taggedArticle(id int, lsn int64, body, category string) cdc.Record {
	row := map[string]any{"id": id, "title": fmt.Sprintf("Doc %d", id), "body": body, "category": category}
	v, err := json.Marshal(map[string]any{"op": "c", "after": row,
		"source": map[string]any{"connector": "postgresql", "name": "shop", "db": "appdb", "schema": "public", "table": "articles",
			"lsn": lsn, "txId": lsn, "ts_ms": 1700000000000}})
	if err != nil {
		panic(err)
	}
	return cdc.Record{Raw: cdc.Raw{Topic: "shop.public.articles", Offset: lsn, Key: fmt.Appendf(nil, `{"id":%d}`, id), Value: v}}
}

// producerTrace is the trace id the first article's change carries.
const producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// fieldsWorld is a file source of two articles whose declared field
// semantic_tag renders their category ("tides", "baking"), with the front
// door on and semantic_tag among its allowed filters.
func fieldsWorld(t *testing.T) fileWorld {
	t.Helper()
	_, schema := pgtest.Schema(t)
	_, prefix := redistest.Client(t)
	dir := t.TempDir()
	w := fileWorld{dir: dir, events: filepath.Join(dir, "events.jsonl"), cfg: filepath.Join(dir, "ragsync.yaml"), schema: schema}
	// The first change continues a producer's trace (a W3C traceparent
	// header), whose id its chunks record.
	var lines strings.Builder
	for i, r := range []cdc.Record{taggedArticle(1, 10, bodyA, "tides"), taggedArticle(2, 20, bodyB, "baking")} {
		line := map[string]any{"topic": r.Topic, "key": json.RawMessage(r.Key), "value": json.RawMessage(r.Value)}
		if i == 0 {
			line["headers"] = map[string]string{"traceparent": "00-" + producerTrace + "-00f067aa0ba902b7-01"}
		}
		raw, err := json.Marshal(line)
		require.NoError(t, err)
		lines.Write(raw)
		lines.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(w.events, []byte(lines.String()), 0o644))
	cfg := fmt.Sprintf(`source:
  kind: file
  file:
    path: %s
tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
    fields:
      semantic_tag: "{{category}}"
embedder:
  provider: hashing
  dimensions: 64
postgres:
  url: %s
  schema: %s
index: fields
http:
  listen: ""
frontdoor:
  enabled: true
  redis_url: %s
  prefix: %s
  allowed_filters: [doc_id, table, semantic_tag]
`, w.events, pgtest.URL(), schema, redistest.URL(), prefix)
	require.NoError(t, os.WriteFile(w.cfg, []byte(cfg), 0o644))
	return w
}

// queryJSON runs query --json with args and decodes its lines.
func queryJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out, _, err := runCtx(t.Context(), append([]string{"query", "--json"}, args...)...)
	require.NoError(t, err)
	var hits []map[string]any
	for line := range strings.Lines(out) {
		var h map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &h), line)
		hits = append(hits, h)
	}
	return hits
}

func docIDs(hits []map[string]any) []string {
	out := []string{}
	for _, h := range hits {
		out = append(out, h["doc_id"].(string))
	}
	return out
}

// A declared metadata field (tables[].fields) is filterable like a
// metadata column, in ragsync query and through the front door: the
// document whose field renders the value is found, another value finds
// nothing. And query --json prints each hit's provenance: what the write
// recorded, null where unknown (a chunk written before provenance was
// recorded), both directly and through the front door.
func TestQueryDeclaredFieldFilterAndProvenance(t *testing.T) {
	w := fieldsWorld(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := runCtx(ctx, "serve", "--config", w.cfg)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	// Both documents in the index before the front door is asked: an
	// earlier query would cache an empty answer for frontdoor.negative_ttl.
	require.Eventually(t, func() bool { return countDocs(t, w.schema) == 2 }, 60*time.Second, 100*time.Millisecond)

	require.Equal(t, []string{"public.articles/1"}, docIDs(queryJSON(t, "--config", w.cfg, "--filter", "semantic_tag=tides", "sourdough")))
	require.Equal(t, []string{"public.articles/2"}, docIDs(queryJSON(t, "--config", w.cfg, "--filter", "semantic_tag=baking", "tide pools")))
	require.Empty(t, queryJSON(t, "--config", w.cfg, "--filter", "semantic_tag=other", "tide pools"))

	var viaRedis []map[string]any
	require.Eventually(t, func() bool {
		out, _, err := runCtx(t.Context(), "query", "--via", "redis", "--timeout", "2s", "--json", "--config", w.cfg, "--filter", "semantic_tag=tides", "sourdough")
		if err != nil {
			return false
		}
		viaRedis = nil
		for line := range strings.Lines(out) {
			var h map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &h), line)
			viaRedis = append(viaRedis, h)
		}
		return len(viaRedis) > 0
	}, 60*time.Second, 200*time.Millisecond)
	require.Equal(t, []string{"public.articles/1"}, docIDs(viaRedis))
	require.Empty(t, queryJSON(t, "--via", "redis", "--timeout", "5s", "--config", w.cfg, "--filter", "semantic_tag=other", "tide pools"))
	require.Equal(t, []string{"public.articles/2"}, docIDs(queryJSON(t, "--via", "redis", "--timeout", "5s", "--config", w.cfg, "--filter", "semantic_tag=baking", "tide pools")))

	// Provenance as written by the pipeline.
	direct := queryJSON(t, "--config", w.cfg, "--filter", "semantic_tag=tides", "tide pools")
	require.Len(t, direct, 1)
	p := direct[0]["provenance"].(map[string]any)
	require.Equal(t, "hashing-v1", p["model"])
	require.Equal(t, 64.0, p["dimensions"])
	require.Equal(t, "dbz:shop/appdb", p["source"])
	require.Equal(t, "pg:000000000000000a", p["source_position"])
	require.Equal(t, "2023-11-14T22:13:20Z", p["committed_at"])
	require.Equal(t, chunkerFingerprint(t, w.cfg), p["chunker"])
	require.Equal(t, "hashing-v1", p["model_version"], "the hashing embedder reports its versioned name")
	require.Equal(t, producerTrace, p["trace_id"])
	require.Equal(t, p, viaRedis[0]["provenance"], "the front door carries the same provenance")

	// A chunk written before provenance was recorded: unknown is null.
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), "UPDATE "+w.schema+".chunks SET model_version = NULL, chunker = NULL, source = NULL,"+
		" source_position = NULL, committed_at = NULL, trace_id = NULL")
	require.NoError(t, err)
	old := queryJSON(t, "--config", w.cfg, "--filter", "semantic_tag=tides", "tide pools")
	require.Len(t, old, 1)
	require.Equal(t, map[string]any{"model": "hashing-v1", "dimensions": 64.0, "model_version": nil, "chunker": nil, "source": nil,
		"source_position": nil, "committed_at": nil, "trace_id": nil}, old[0]["provenance"])
}

// chunkerFingerprint is the chunker fingerprint of the config at path.
func chunkerFingerprint(t *testing.T, path string) string {
	t.Helper()
	g := &globals{configPath: path, red: redact.New()}
	cfg, err := g.loadValid(false)
	require.NoError(t, err)
	return cfg.ChunkerConfig().WithDefaults().Fingerprint()
}
