// Command backlog measures ragsync's memory bound under a Kafka backlog: it
// puts a backlog of Debezium events on an in-process Kafka (kfake), drains it
// with `ragsync serve --once` as a separate process, samples the process's
// peak RSS (VmHWM in /proc/<pid>/status) and reports events/s. It fails when
// the peak exceeds -max-rss-mb, the documented bound.
//
//	go run ./bench/backlog -bin bin/ragsync [-events 200000] [-max-rss-mb 400]
package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/bench/internal/child"
)

const topic = "dbserver1.public.articles"

func main() {
	bin := flag.String("bin", "bin/ragsync", "ragsync binary")
	events := flag.Int("events", 200_000, "events in the backlog")
	docs := flag.Int("docs", 20_000, "distinct documents")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	maxRSS := flag.Int("max-rss-mb", 400, "fail when peak RSS exceeds this many MiB (the documented bound)")
	flag.Parse()
	if err := run(*bin, *events, *docs, *pgURL, *maxRSS); err != nil {
		fmt.Fprintln(os.Stderr, "backlog:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(bin string, events, docs int, pgURL string, maxRSS int) error {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	for i := 0; i < events; {
		var recs []*kgo.Record
		for ; i < events && len(recs) < 2000; i++ {
			recs = append(recs, backlog.Event(i, docs))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("produced %d events over %d documents in %s\n", events, docs, time.Since(start).Round(time.Millisecond))

	var b [5]byte
	_, _ = crand.Read(b[:])
	schema := "bench_backlog_" + hex.EncodeToString(b[:])
	defer func() {
		if conn, err := pgx.Connect(ctx, pgURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	}()
	dir, err := os.MkdirTemp("", "backlog")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ragsync.yaml")
	yaml := fmt.Sprintf(`source:
  kind: kafka
  kafka:
    brokers: [%s]
    topics: [%s]
    group: backlog
`, strings.Join(c.ListenAddrs(), ","), topic) + child.Settings("public.articles", pgURL, schema, "backlog")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--once", "--config", cfg)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	var peak, samples atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if kb, ok := vmHWM(cmd.Process.Pid); ok {
				peak.Store(max(peak.Load(), kb))
				samples.Add(1)
			} else {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	err = cmd.Wait()
	<-done
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("serve: %w\n%s", err, out.String())
	}
	// Exit 0 means drained; still count what it did, so a summary that
	// disagrees with the events produced fails the bench.
	if drained := child.Drained(out.String()); drained < events {
		return fmt.Errorf("serve stopped after %d of %d events: %s", drained, events, strings.TrimSpace(out.String()))
	}
	peakMB := float64(peak.Load()) / 1024
	res := map[string]any{
		"events": events, "documents": docs, "seconds": elapsed.Seconds(),
		"events_per_second": float64(events) / elapsed.Seconds(), "peak_rss_mib": peakMB,
		"bound_mib": maxRSS, "rss_samples": samples.Load(), "summary": strings.TrimSpace(out.String()),
	}
	j, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(j))
	fmt.Printf("backlog: %d events in %s = %.0f events/s, peak RSS %.1f MiB (bound %d MiB)\n",
		events, elapsed.Round(time.Millisecond), float64(events)/elapsed.Seconds(), peakMB, maxRSS)
	if peakMB > float64(maxRSS) {
		return fmt.Errorf("peak RSS %.1f MiB over the bound %d MiB", peakMB, maxRSS)
	}
	return nil
}

// vmHWM reads the peak resident set size (kB) of pid; false once it is gone.
func vmHWM(pid int) (int64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil && n > 0 // a zombie reports no memory
		}
	}
	return 0, false
}
