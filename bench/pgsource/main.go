// Command pgsource compares the two ways changes reach ragsync:
// straight from a Postgres replication slot (source.kind postgres) and as
// Debezium events on Kafka (an in-process kfake). The same changes — inserts
// and updates of -docs documents, committed -tx to a transaction — go
// through both paths, each drained by `ragsync serve --once` (a separate
// process) into its own index schema; each path runs -runs times,
// alternating, and the median events/s of each and their ratio are printed.
//
//	go run ./bench/pgsource -bin bin/ragsync [-events 20000] [-runs 3]
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/bench/internal/child"
	"github.com/ragsync/ragsync/internal/orphan"
)

const topic = "dbserver1.public.articles"

func main() {
	bin := flag.String("bin", "bin/ragsync", "ragsync binary")
	events := flag.Int("events", 20_000, "changes to apply")
	docs := flag.Int("docs", 4_000, "distinct documents")
	perTx := flag.Int("tx", 50, "changes per source transaction")
	runs := flag.Int("runs", 3, "runs of each path (alternating); medians are reported")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL (source and index)")
	flag.Parse()
	if err := run(*bin, *pgURL, *events, *docs, *perTx, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "pgsource:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type change struct {
	id          int
	title, body string
}

// changes makes n upserts over docs documents, deterministic.
func changes(n, docs int) []change {
	r := rand.New(rand.NewPCG(13, 13))
	words := strings.Fields(`river stone lantern harbour copper meadow falcon orchard glacier ember velvet canyon
		thistle compass marble juniper quartz willow saffron beacon tundra cobalt prairie lagoon cinder fjord hazel`)
	para := func() string {
		ws := make([]string, 20+r.IntN(30))
		for i := range ws {
			ws[i] = words[r.IntN(len(words))] + strconv.Itoa(r.IntN(97))
		}
		return strings.Join(ws, " ") + "."
	}
	out := make([]change, n)
	for i := range out {
		id := i % docs
		if i >= docs {
			id = r.IntN(docs)
		}
		out[i] = change{id: id, title: fmt.Sprintf("Doc %d", id), body: para() + "\n\n" + para()}
	}
	return out
}

func run(bin, pgURL string, events, docs, perTx, runs int) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var b [5]byte
	_, _ = crand.Read(b[:])
	id := hex.EncodeToString(b[:])
	src := "bench_pgsrc_" + id
	var cleanup []string
	defer func() {
		for _, q := range slices.Backward(cleanup) {
			if _, err := conn.Exec(ctx, q); err != nil {
				fmt.Fprintf(os.Stderr, "cleanup: %s: %v\n", q, err)
			}
		}
	}()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %s; CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text);
		CREATE PUBLICATION %s FOR TABLE %s.articles`, src, src, src, src)); err != nil {
		return err
	}
	cleanup = append(cleanup, "DROP SCHEMA "+src+" CASCADE", "DROP PUBLICATION "+src)
	chs := changes(events, docs)

	// One slot per run, all created before the writes, so each run streams
	// exactly these changes.
	var slots []string
	for i := range runs {
		slot := fmt.Sprintf("%s_%d", src, i)
		if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
			return fmt.Errorf("create slot: %w", err)
		}
		slots = append(slots, slot)
		cleanup = append(cleanup, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", slot))
	}
	start := time.Now()
	for i := 0; i < len(chs); i += perTx {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		for _, c := range chs[i:min(i+perTx, len(chs))] {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.articles VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET title = excluded.title, body = excluded.body`, src), c.id, c.title, c.body); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d changes over %d documents to %s.articles in %s\n", events, docs, src, time.Since(start).Round(time.Millisecond))

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		return err
	}
	defer kc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i, c := range chs {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, `{"id":%d}`, c.id), Value: debezium(c, int64(1000+10*i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}

	dir, err := os.MkdirTemp("", "pgsource")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var pgRates, kRates []float64
	for i := range runs {
		for _, path := range []string{"postgres", "kafka"} {
			schema := fmt.Sprintf("bench_pgsrc_ix_%s_%s_%d", id, path, i)
			cleanup = append(cleanup, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			var source, match string
			if path == "postgres" {
				source = fmt.Sprintf("source:\n  kind: postgres\n  postgres:\n    url: %s\n    slot: %s\n    publication: %s\n    initial_load: false\n", pgURL, slots[i], src)
				match = src + ".articles"
			} else {
				source = fmt.Sprintf("source:\n  kind: kafka\n  kafka:\n    brokers: [%s]\n    topics: [%s]\n    group: bench%d\n", strings.Join(kc.ListenAddrs(), ","), topic, i)
				match = "public.articles"
			}
			secs, err := serveOnce(bin, dir, source, match, pgURL, schema, events)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", path, i, err)
			}
			rate := float64(events) / secs
			fmt.Printf("run %d %-8s %d events in %.2fs = %.0f events/s\n", i, path, events, secs, rate)
			if path == "postgres" {
				pgRates = append(pgRates, rate)
			} else {
				kRates = append(kRates, rate)
			}
		}
	}
	pg, k := median(pgRates), median(kRates)
	res := map[string]any{"events": events, "documents": docs, "changes_per_tx": perTx, "runs": runs,
		"postgres_events_per_second": pg, "kafka_events_per_second": k, "postgres_over_kafka": pg / k}
	j, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(j))
	fmt.Printf("pgsource: slot -> sink %.0f events/s, kfake -> sink %.0f events/s (medians of %d), ratio %.2f\n", pg, k, runs, pg/k)
	return nil
}

// serveOnce drains the source with `serve --once` and returns its wall time.
func serveOnce(bin, dir, source, match, pgURL, schema string, events int) (float64, error) {
	cfg := filepath.Join(dir, schema+".yaml")
	yaml := source + child.Settings(match, pgURL, schema, "bench") +
		fmt.Sprintf("dlq:\n  path: %s\n", filepath.Join(dir, schema+".dlq.jsonl"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return 0, err
	}
	cmd := orphan.DieWithParent(exec.Command(bin, "serve", "--once", "--config", cfg))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("serve: %w\n%s", err, out.String())
	}
	secs := time.Since(start).Seconds()
	if drained := child.Drained(out.String()); drained < events {
		return 0, fmt.Errorf("serve stopped after %d of %d events: %s", drained, events, strings.TrimSpace(out.String()))
	}
	return secs, nil
}

// debezium renders c as the Debezium PostgreSQL connector's payload-only
// envelope; every change is an upsert ("c" for the first of a document
// would differ only in the op, which the pipeline treats alike).
func debezium(c change, lsn int64) []byte {
	v, _ := json.Marshal(map[string]any{
		"before": nil,
		"after":  map[string]any{"id": c.id, "title": c.title, "body": c.body},
		"source": map[string]any{"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1700000000000 + lsn,
			"snapshot": "false", "db": "app", "schema": "public", "table": "articles", "txId": 500 + lsn/500, "lsn": lsn},
		"op": "u", "ts_ms": 1700000000000 + lsn,
	})
	return v
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
