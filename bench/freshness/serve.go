package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/internal/orphan"
)

// runServe measures freshness through `ragsync serve` (o.bin, a child
// process) streaming a replication slot of its own (source.kind postgres)
// into an index schema of its own, with the fake provider in this process.
// The figures come from serve's own ragsync_pipeline_freshness_seconds: its
// buckets are read when measuring starts and after the last change had two
// seconds to land, and the quantiles of the difference are interpolated
// within the buckets, as Prometheus' histogram_quantile does. The thirds
// of the window (see window.stats) are read from the same histogram,
// scraped a third and two thirds into the window as well: serve's
// histogram knows when each change was applied, not when it was
// committed, so here the thirds are by the time of application (a queue
// that grows still shows as a higher p50 in the last third).
func runServe(ctx context.Context, o options, rate float64) (result, error) {
	res := result{rate: rate}
	sv, err := startServe(ctx, o, "")
	if err != nil {
		return res, err
	}
	defer sv.stop()
	base, write, serveLog := sv.base, sv.write, sv.log

	// scrapes holds the buckets at the start of the window, a third and
	// two thirds into it.
	var scrapes [3]map[float64]float64
	scraped := make(chan error, 1)
	_, err = drive(ctx, o, rate, write, func(from time.Time) {
		go func() {
			for k := range scrapes {
				time.Sleep(time.Until(from.Add(time.Duration(k) * o.duration / 3)))
				var err error
				if scrapes[k], err = freshnessBuckets(base); err != nil {
					scraped <- err
					return
				}
			}
			scraped <- nil
		}()
	})
	if err != nil {
		return res, err
	}
	if err := <-scraped; err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second)
	after, err := freshnessBuckets(base)
	if err != nil {
		return res, fmt.Errorf("%w\nserve's output:\n%s", err, serveLog())
	}
	les := make([]float64, 0, len(after))
	for le := range after {
		les = append(les, le)
	}
	slices.Sort(les)
	// between is the bucket counts observed from a to b.
	between := func(a, b map[float64]float64) []float64 {
		counts := make([]float64, len(les))
		for i, le := range les {
			counts[i] = b[le] - a[le]
		}
		return counts
	}
	counts := between(scrapes[0], after)
	total := counts[len(counts)-1] // le=+Inf
	if total <= 0 {
		return res, fmt.Errorf("serve applied nothing in the measured window\nserve's output:\n%s", serveLog())
	}
	q := func(f float64, counts []float64) time.Duration {
		if counts[len(counts)-1] <= 0 {
			return 0
		}
		return time.Duration(histogramQuantile(f, les, counts) * float64(time.Second))
	}
	res.p50, res.p95, res.p99 = q(0.50, counts), q(0.95, counts), q(0.99, counts)
	res.applied = total / o.duration.Seconds()
	res.thirds = true
	res.first, res.last = q(0.50, between(scrapes[0], scrapes[1])), q(0.50, between(scrapes[2], after))
	if res.first > 0 {
		res.growth = float64(res.last) / float64(res.first)
	}
	return res, nil
}

// served is `ragsync serve` running as a child process on a replication
// slot of its own, into an index schema of its own, with the fake provider
// in this process.
type served struct {
	base, schema, slot string
	// write commits a change of a document in the source table.
	write func(context.Context, int, string, time.Time) error
	log   func() string
	stop  func()
}

// startServe starts serve (o.bin) with tables[].text set to text ("" the
// default: every text column) and waits until it is ready.
func startServe(ctx context.Context, o options, text string) (sv served, err error) {
	var undo []func()
	sv.stop = func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	defer func() {
		if err != nil {
			sv.stop()
		}
	}()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "bench_fresh_" + hex.EncodeToString(rb[:])
	sv.schema = schema
	undo = append(undo, func() {
		conn, err := pgx.Connect(context.Background(), o.url)
		if err != nil {
			warnf("clean up: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			warnf("clean up: drop schema %s: %v", schema, err)
		}
	})
	srv, closeSrv := fakeProvider(o)
	undo = append(undo, closeSrv)
	name, write, _, drop, err := pgSource(ctx, o)
	if err != nil {
		return sv, err
	}
	undo = append(undo, drop)
	sv.slot, sv.write = name, write

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sv, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "bench-freshness")
	if err != nil {
		return sv, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	cfg := filepath.Join(dir, "ragsync.yaml")
	workers := "pipeline:\n"
	if o.workers > 0 {
		workers += fmt.Sprintf("  workers: %d\n", o.workers)
	}
	if o.inFlightBytes > 0 {
		workers += fmt.Sprintf("  max_in_flight_bytes: %d\n", o.inFlightBytes)
	}
	if o.inFlightDocs > 0 {
		workers += fmt.Sprintf("  max_in_flight_documents: %d\n", o.inFlightDocs)
	}
	if workers == "pipeline:\n" {
		workers = ""
	}
	textLine := ""
	if text != "" {
		textLine = fmt.Sprintf("    text: %q\n", text)
	}
	yaml := fmt.Sprintf(`source:
  kind: postgres
  postgres:
    url: %[1]s
    slot: %[2]s
    publication: %[2]s
    initial_load: false
tables:
  - match: %[2]s.articles
%[9]sembedder:
  provider: openai
  base_url: %[3]s
  model: text-embedding-3-small
  dimensions: %[4]d
  api_key: bench
postgres:
  url: %[1]s
  schema: %[5]s
index: bench
http:
  listen: %[6]s
dlq:
  path: %[7]s
%[8]s`, o.url, name, srv.URL, o.dims, schema, addr, filepath.Join(dir, "dlq.jsonl"), workers, textLine)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return sv, err
	}
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return sv, err
	}
	undo = append(undo, func() { logf.Close() })
	cmd := orphan.DieWithParent(exec.Command(o.bin, "serve", "--config", cfg))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return sv, fmt.Errorf("start %s serve: %w (build it with make build, or pass -bin)", o.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sv.log = func() string { b, _ := os.ReadFile(logPath); return string(b) }
	undo = append(undo, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	sv.base = "http://" + addr
	if err := waitReady(sv.base, exited, 2*time.Minute); err != nil {
		return sv, fmt.Errorf("%w\nserve's output:\n%s", err, sv.log())
	}
	return sv, nil
}

// waitReady waits for serve's /readyz to answer 200.
func waitReady(base string, exited <-chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("serve exited before it was ready: %v", err)
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("serve not ready within %s", limit)
}

// freshnessBuckets reads serve's cumulative ragsync_pipeline_freshness_seconds
// bucket counts by upper bound (+Inf as math.Inf(1)), summed over labels.
func freshnessBuckets(base string) (map[float64]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ragsync_pipeline_freshness_seconds_bucket{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		leText, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		le, err1 := strconv.ParseFloat(leText, 64)
		n, err2 := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("parse metrics line %q", line)
		}
		out[le] += n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ragsync_pipeline_freshness_seconds in %s/metrics", base)
	}
	return out, nil
}

// histogramQuantile is Prometheus' histogram_quantile over cumulative
// counts by ascending upper bounds (the last +Inf): linear within the
// bucket the rank falls in; in the +Inf bucket, the last finite bound.
func histogramQuantile(q float64, les, counts []float64) float64 {
	total := counts[len(counts)-1]
	rank := q * total
	i := 0
	for i < len(counts)-1 && counts[i] < rank {
		i++
	}
	if math.IsInf(les[i], 1) {
		return les[len(les)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = les[i-1], counts[i-1]
	}
	in := counts[i] - below
	if in <= 0 {
		return les[i]
	}
	return lower + (les[i]-lower)*(rank-below)/in
}
