// Command pgsourcemem checks that the Postgres source's memory stays
// bounded whatever a transaction's size: one transaction writes -rows rows
// whose body (the templated column) holds -row-kib KiB of distinct text
// each (≥ 500 MB by default), and `ragsync serve --once` (a separate
// process, source.kind postgres) drains it while its peak RSS (VmHWM in
// /proc/<pid>/status) is sampled. It fails when the peak passes -max-rss-mib
// or when any row of the transaction is not in the index.
//
//	go run ./bench/pgsourcemem -bin bin/ragsync [-rows 8000 -row-kib 64 -max-rss-mib 300]
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/bench/internal/child"
	"github.com/ragsync/ragsync/internal/orphan"
	"github.com/ragsync/ragsync/sink"
)

func main() {
	bin := flag.String("bin", "bin/ragsync", "ragsync binary")
	rows := flag.Int("rows", 8000, "rows in the one transaction")
	rowKiB := flag.Int("row-kib", 64, "KiB of distinct text in each row's body")
	maxRSS := flag.Int("max-rss-mib", 300, "fail when serve's peak RSS passes this")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL (source and index)")
	flag.Parse()
	if err := run(*bin, *pgURL, *rows, *rowKiB, *maxRSS); err != nil {
		fmt.Fprintln(os.Stderr, "pgsourcemem:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(bin, pgURL string, rows, rowKiB, maxRSS int) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var b [5]byte
	_, _ = crand.Read(b[:])
	id := hex.EncodeToString(b[:])
	src, slot, schema := "bench_pgmem_"+id, "bench_pgmem_"+id, "bench_pgmem_ix_"+id
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
	cleanup = append(cleanup, "DROP SCHEMA "+src+" CASCADE", "DROP PUBLICATION "+src, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	// The slot exists before the transaction, so serve streams it (no
	// initial load).
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		return fmt.Errorf("create slot: %w", err)
	}
	cleanup = append(cleanup, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", slot))

	// 33 bytes per md5 word: distinct text that does not compress.
	words := rowKiB * 1024 / 33
	start := time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.articles
SELECT g, 'Doc ' || g, (SELECT string_agg(md5(g::text || '-' || i), ' ') FROM generate_series(1, %d) i)
FROM generate_series(1, %d) g`, src, words, rows)); err != nil {
		return fmt.Errorf("write the transaction: %w", err)
	}
	var textBytes int64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT sum(octet_length(title) + octet_length(body)) FROM %s.articles", src)).Scan(&textBytes); err != nil {
		return err
	}
	fmt.Printf("wrote one transaction of %d rows, %.0f MB of text, in %s\n", rows, float64(textBytes)/1e6, time.Since(start).Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "pgsourcemem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ragsync.yaml")
	// Large chunks and few dimensions: the bench measures the source's
	// memory, not HNSW insert speed.
	settings := strings.NewReplacer("target_tokens: 60", "target_tokens: 4000", "min_tokens: 20", "min_tokens: 1000",
		"max_tokens: 200", "max_tokens: 8000", "dimensions: 256", "dimensions: 16").Replace(child.Settings(src+".articles", pgURL, schema, "bench"))
	yaml := fmt.Sprintf("source:\n  kind: postgres\n  postgres:\n    url: %s\n    slot: %s\n    publication: %s\n    initial_load: false\n", pgURL, slot, src) +
		settings + fmt.Sprintf("dlq:\n  path: %s\n", filepath.Join(dir, "dlq.jsonl"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return err
	}
	cmd := orphan.DieWithParent(exec.Command(bin, "serve", "--once", "--config", cfg))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; {
			if kb, ok := vmHWM(cmd.Process.Pid); ok {
				peak.Store(max(peak.Load(), kb))
			} else {
				return
			}
			if n++; n%600 == 0 {
				fmt.Printf("after %s: peak RSS so far %.1f MiB\n", time.Since(start).Round(time.Second), float64(peak.Load())/1024)
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
	if drained := child.Drained(out.String()); drained < rows {
		return fmt.Errorf("serve stopped after %d of %d rows: %s", drained, rows, strings.TrimSpace(out.String()))
	}
	// What serve indexed, read through the index's owner.
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	indexed, err := sink.NewCatalog(pool, schema).LiveDocuments(ctx, src+".articles")
	if err != nil {
		return err
	}
	peakMiB := float64(peak.Load()) / 1024
	res := map[string]any{"rows": rows, "text_bytes": textBytes, "seconds": elapsed.Seconds(), "peak_rss_mib": peakMiB,
		"bound_mib": maxRSS, "indexed": indexed, "summary": strings.TrimSpace(out.String())}
	j, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(j))
	fmt.Printf("pgsourcemem: one %.0f MB transaction (%d rows) applied in %s, peak RSS %.1f MiB (bound %d MiB), %d of %d rows indexed\n",
		float64(textBytes)/1e6, rows, elapsed.Round(time.Second), peakMiB, maxRSS, indexed, rows)
	if indexed != int64(rows) {
		return fmt.Errorf("%d of %d rows indexed", indexed, rows)
	}
	if peakMiB > float64(maxRSS) {
		return fmt.Errorf("peak RSS %.1f MiB over the bound %d MiB", peakMiB, maxRSS)
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
