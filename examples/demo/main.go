// Command demo runs ragsync end to end with nothing but Postgres: an
// in-process Kafka cluster (franz-go's kfake, speaking the real protocol)
// receives Debezium change events for a small Markdown corpus — creates, then
// edits and deletes — and the real ragsync binary consumes them with the
// offline embedder into pgvector. It then runs three sample queries.
//
// Each run writes to a schema of its own (ragsync_demo_<random>), so that
// two people running it against one database do not drop each other's
// index, and drops it at the end (--keep keeps it to query).
//
//	go run ./examples/demo --ragsync bin/ragsync
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "dbserver1.public.articles"

type step struct {
	Op     string   `json:"op"`
	ID     int      `json:"id"`
	File   string   `json:"file"`
	Tenant string   `json:"tenant"`
	Tags   []string `json:"tags"`
}

type query struct {
	Query    string `json:"query"`
	ExpectID int    `json:"expect_id"`
}

func main() {
	var (
		bin    = flag.String("ragsync", "bin/ragsync", "path of the ragsync binary")
		dir    = flag.String("dir", "examples/demo", "directory with corpus/, script.json and queries.json")
		pgURL  = flag.String("postgres-url", envOr("RAGSYNC_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres to write the demo index to")
		schema = flag.String("schema", "", "schema for the demo index, dropped first if it exists; default ragsync_demo_<random>, one per run")
		keep   = flag.Bool("keep", false, "keep the demo's schema at the end (it is dropped otherwise) and print how to query it")
	)
	flag.Parse()
	// Interrupted, the demo still drops its schema: the serve it runs gets
	// the terminal's signal too and ends, and run returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *schema == "" {
		*schema = "ragsync_demo_" + randomSuffix()
	}
	err := run(ctx, *bin, *dir, *pgURL, *schema, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
}

// randomSuffix is 8 lower-case hex digits: a schema name unique per run.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func run(ctx context.Context, bin, dir, pgURL, schema string, keep bool) (err error) {
	var script []step
	if err := readJSON(filepath.Join(dir, "script.json"), &script); err != nil {
		return err
	}
	var queries []query
	if err := readJSON(filepath.Join(dir, "queries.json"), &queries); err != nil {
		return err
	}
	if err := dropSchema(ctx, pgURL, schema); err != nil {
		return err
	}
	if !keep {
		defer func() {
			// Dropped whatever happened, interrupted or not.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := dropSchema(dctx, pgURL, schema); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop the demo's schema %s: %w", schema, derr))
				return
			}
			fmt.Printf("\nschema %q dropped (run with --keep to keep it and query it yourself)\n", schema)
		}()
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		return fmt.Errorf("start in-process kafka: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer producer.Close()

	tmp, err := os.MkdirTemp("", "ragsync-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfgPath := filepath.Join(tmp, "ragsync.yaml")
	if err := os.WriteFile(cfgPath, []byte(demoConfig(brokers, pgURL, schema)), 0o644); err != nil {
		return err
	}
	fmt.Printf("ragsync demo: in-process Kafka at %s, index in schema %q, offline hashing embedder\n\n", strings.Join(brokers, ","), schema)

	var creates, changes []step
	for _, s := range script {
		if s.Op == "c" {
			creates = append(creates, s)
		} else {
			changes = append(changes, s)
		}
	}
	lsn := int64(0x1000000)
	phases := []struct {
		name  string
		steps []step
	}{
		{"initial load", creates},
		{"edits and deletes", changes},
	}
	for i, ph := range phases {
		recs, byOp, err := events(dir, ph.steps, &lsn)
		if err != nil {
			return err
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		fmt.Printf("phase %d, %s: produced %s to %s\n", i+1, ph.name, describe(byOp), topic)
		stats, err := serveOnce(ctx, bin, cfgPath)
		if err != nil {
			return err
		}
		fmt.Printf("  ragsync serve --once: applied %d (creates %d, updates %d, deletes %d), tombstones skipped %d\n",
			stats["applied"], stats["op_c"], stats["op_u"], stats["op_d"], stats["skipped_tombstone"])
		fmt.Printf("  chunks written %d, unchanged (kept, not re-embedded) %d, moved %d, removed %d\n",
			stats["chunks_inserted"], stats["chunks_unchanged"], stats["chunks_moved"], stats["chunks_removed"])
		// chunks_cached counts every chunk whose vector came from the cache,
		// which includes the unchanged and moved ones above: count those
		// once, and only the rest as new rows that took a cached vector.
		newFromCache := max(0, stats["chunks_cached"]-stats["chunks_unchanged"]-stats["chunks_moved"])
		fmt.Printf("  embedding: %d chunk texts sent to the embedder; no call for the %d unchanged and %d moved chunks, nor for %d new chunks whose text was embedded before (content hash)\n\n",
			stats["chunks_embedded"], stats["chunks_unchanged"], stats["chunks_moved"], newFromCache)
	}

	fmt.Println("queries (ragsync query -k 3):")
	fmt.Println("  Scores around 0.2 are normal here: the offline hashing embedder matches words, not meaning.")
	fmt.Println("  The ranking is what to look at; a real embedding model scores relevant chunks higher.")
	for _, q := range queries {
		out, err := exec.Command(bin, "query", "--config", cfgPath, "-k", "3", "--all-tenants", "--json", q.Query).Output()
		if err != nil {
			return fmt.Errorf("ragsync query: %w", exitDetail(err))
		}
		fmt.Printf("\n  %q\n", q.Query)
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var h struct {
				Rank     int     `json:"rank"`
				DocID    string  `json:"doc_id"`
				Position int     `json:"position"`
				Score    float64 `json:"score"`
				Text     string  `json:"text"`
			}
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				return err
			}
			mark := ""
			if h.Rank == 1 {
				if h.DocID == fmt.Sprintf("public.articles/%d", q.ExpectID) {
					mark = "  <- expected"
				} else {
					mark = fmt.Sprintf("  (expected public.articles/%d)", q.ExpectID)
				}
			}
			fmt.Printf("   %d. %.3f %s #%d%s\n      %s\n", h.Rank, h.Score, h.DocID, h.Position, mark, snippet(h.Text, 110))
		}
	}
	if keep {
		fmt.Printf("\ndone. The index stays in schema %q; query it yourself with\n  %s query --postgres-url '%s' --set postgres.schema=%s --index articles \"how do I feed a sourdough starter\"\nand drop it with DROP SCHEMA %s CASCADE\n",
			schema, bin, pgURL, schema, schema)
	} else {
		fmt.Println("\ndone.")
	}
	return nil
}

// events renders script steps as Debezium PostgreSQL change events
// (payload-only JsonConverter values, keys {"id":N}); each delete is followed
// by its tombstone, as Debezium does.
func events(dir string, steps []step, lsn *int64) ([]*kgo.Record, map[string]int, error) {
	var recs []*kgo.Record
	byOp := map[string]int{}
	for _, s := range steps {
		*lsn += 0x200
		key := fmt.Sprintf(`{"id":%d}`, s.ID)
		source := map[string]any{
			"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1",
			"ts_ms": time.Now().UnixMilli(), "snapshot": "false", "db": "app",
			"schema": "public", "table": "articles", "txId": 700 + *lsn/0x200, "lsn": *lsn,
		}
		payload := map[string]any{"op": s.Op, "source": source, "ts_ms": time.Now().UnixMilli()}
		switch s.Op {
		case "c", "u":
			raw, err := os.ReadFile(filepath.Join(dir, "corpus", s.File))
			if err != nil {
				return nil, nil, err
			}
			title, body, _ := strings.Cut(string(raw), "\n")
			row := map[string]any{
				"id": s.ID, "title": strings.TrimSpace(strings.TrimPrefix(title, "#")),
				"body": strings.TrimSpace(body), "tenant": s.Tenant, "tags": s.Tags,
			}
			payload["before"] = nil
			payload["after"] = row
		case "d":
			payload["before"] = map[string]any{"id": s.ID}
			payload["after"] = nil
		default:
			return nil, nil, fmt.Errorf("script: unknown op %q", s.Op)
		}
		value, err := json.Marshal(payload)
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: value})
		byOp[s.Op]++
		if s.Op == "d" {
			recs = append(recs, &kgo.Record{Key: []byte(key)}) // tombstone
			byOp["tombstone"]++
		}
	}
	return recs, byOp, nil
}

func describe(byOp map[string]int) string {
	var parts []string
	for _, op := range []string{"c", "u", "d", "tombstone"} {
		if n := byOp[op]; n > 0 {
			name := map[string]string{"c": "creates", "u": "updates", "d": "deletes", "tombstone": "tombstones"}[op]
			parts = append(parts, fmt.Sprintf("%d %s", n, name))
		}
	}
	return strings.Join(parts, ", ")
}

// serveOnce runs `ragsync serve --once` and parses its key=value summary.
func serveOnce(ctx context.Context, bin, cfgPath string) (map[string]int, error) {
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfgPath, "--once")
	// Stopped like a terminal's Ctrl-C would: serve drains and exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ragsync serve --once: %w\n%s", err, stderr.String())
	}
	stats := map[string]int{}
	for _, f := range strings.Fields(string(out)) {
		k, v, ok := strings.Cut(f, "=")
		if n, err := strconv.Atoi(v); ok && err == nil {
			stats[k] = n
		}
	}
	return stats, nil
}

func demoConfig(brokers []string, pgURL, schema string) string {
	return fmt.Sprintf(`source:
  kind: kafka
  kafka:
    brokers: [%s]
    topics: [%s]
    group: ragsync-demo
tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
    metadata: [tenant, tags]
    tenant: tenant
chunker:
  target_tokens: 120
  min_tokens: 40
  max_tokens: 300
embedder:
  provider: hashing
  dimensions: 384
postgres:
  url: %s
  schema: %s
index: articles
http:
  listen: ""
log:
  level: warn
`, strings.Join(brokers, ", "), topic, pgURL, schema)
}

// dropSchema drops the demo's schema and everything in it, if it exists.
func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w (run make services)", url, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}
