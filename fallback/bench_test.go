package fallback

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/internal/redistest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
	"github.com/redis/go-redis/v9"
)

// The benchmarks share one corpus (built once, dropped in TestMain): benchDocs
// documents of benchChunks chunks each, benchDims-dimensional vectors with an
// HNSW index, tenants spread over 20 names. Run them together:
//
//	go test -run '^$' -bench 'FrontDoor|DirectPgvector|HitVsDirect|Zipf' -benchtime 3s ./fallback
//
// (make bench-frontdoor). Each reports req/s, p50_ms and p99_ms over every
// request of the run (client-observed, Client decode included); the Zipf one
// reports hit_ratio. The load generator, the front door and Redis share the
// machine's cores, so on a busy box the tail is mostly waiting for a CPU:
// read the p99s next to the load average, and HitVsDirect's ratio, which
// both sides see under the same load.
const (
	benchDocs    = 2000
	benchChunks  = 3
	benchDims    = 384
	benchClients = 8 // concurrent client goroutines, whatever GOMAXPROCS is
)

// benchWorkers is the front door's worker count in the benchmarks
// (BENCH_WORKERS; unset means the configuration's default).
var benchWorkers = func() int {
	n, _ := strconv.Atoi(os.Getenv("BENCH_WORKERS"))
	return n
}()

var vocabulary = strings.Fields(`redis stream consumer group pending entry worker cache bloom filter tenant
document chunk vector embedding cosine search index postgres pgvector hnsw query answer reply degraded
stale breaker circuit retry dead letter queue idempotent request latency throughput burst stampede
coalesce singleflight lock expiry jitter negative penetration generation reindex metadata table key`)

func benchText(r *rand.Rand, words int) string {
	w := make([]string, words)
	for i := range w {
		w[i] = vocabulary[r.IntN(len(vocabulary))]
	}
	return strings.Join(w, " ")
}

type benchFixture struct {
	rdb    *redis.Client
	prefix string
	pool   interface{ Close() }
	store  *sink.Store
	schema string
	err    error
}

var (
	benchOnce sync.Once
	bench     benchFixture
)

func closeBenchFixture() {
	if bench.store == nil {
		return
	}
	ctx := context.Background()
	bench.pool.Close()
	if conn, err := pgx.Connect(ctx, pgtest.URL()); err == nil {
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{bench.schema}.Sanitize()+" CASCADE")
		_ = conn.Close(ctx)
	}
	var cursor uint64
	for {
		keys, next, err := bench.rdb.Scan(ctx, cursor, bench.prefix+":*", 1000).Result()
		if err != nil {
			break
		}
		if len(keys) > 0 {
			bench.rdb.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	_ = bench.rdb.Close()
}

func benchSetup(b *testing.B) *benchFixture {
	b.Helper()
	if testing.Short() {
		b.Skip("needs Redis and Postgres")
	}
	benchOnce.Do(func() {
		ctx := context.Background()
		// The pool size must be set before NewClient: the pool is built
		// there (setting it on Options() afterwards changed nothing, and
		// under GOMAXPROCS=1 the default 10 connections were all held by
		// blocking stream reads).
		opts := mustParseRedis(redistest.URL())
		opts.PoolSize = 128
		bench.rdb = redis.NewClient(opts)
		bench.prefix = fmt.Sprintf("bench:%d", time.Now().UnixNano())
		bench.schema = fmt.Sprintf("bench_%d", time.Now().UnixNano())
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			bench.err = err
			return
		}
		_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{bench.schema}.Sanitize())
		_ = conn.Close(ctx)
		if err != nil {
			bench.err = err
			return
		}
		pool, err := sink.OpenPool(ctx, pgtest.URL(), bench.schema)
		if err != nil {
			bench.err = err
			return
		}
		bench.pool = pool
		if bench.err = migrations.Up(ctx, pool, bench.schema, nil); bench.err != nil {
			return
		}
		store, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: bench.schema, Index: "bench", Model: "test-bow", Dimensions: benchDims})
		if err != nil {
			bench.err = err
			return
		}
		bench.store = store
		r := rand.New(rand.NewPCG(1, 2))
		for i := range benchDocs {
			d := sink.Document{Table: "public.articles", Key: fmt.Sprint(i), Tenant: fmt.Sprint("tenant-", i%20),
				Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}, SourceTS: time.Now()}
			for c := range benchChunks {
				text := benchText(r, 60)
				d.Chunks = append(d.Chunks, sink.Chunk{Position: c, Hash: fmt.Sprintf("%d-%d", i, c), Text: text, Tokens: 60, Vector: embedDims(text, benchDims)})
			}
			if _, err := store.Upsert(ctx, d); err != nil {
				bench.err = err
				return
			}
		}
		// Autovacuum would analyze the fresh tables eventually; without
		// statistics the planner skips the HNSW index and the baseline would
		// be unfairly slow.
		if _, err := pool.Exec(ctx, "ANALYZE chunks; ANALYZE documents"); err != nil {
			bench.err = err
			return
		}
	})
	if bench.err != nil {
		b.Fatalf("bench fixture: %v", bench.err)
	}
	return &bench
}

func mustParseRedis(url string) *redis.Options {
	o, err := redis.ParseURL(url)
	if err != nil {
		panic(err) // programmer error in TEST_REDIS_URL
	}
	return o
}

// startBenchFrontDoor runs a front door on a fresh prefix for one benchmark.
func startBenchFrontDoor(b *testing.B, f *benchFixture) (*FrontDoor, *Client, *prometheus.Registry) {
	b.Helper()
	prefix := fmt.Sprintf("%s:%d", f.prefix, time.Now().UnixNano())
	reg := prometheus.NewRegistry()
	fd, err := NewFrontDoor(Config{Prefix: prefix, Index: "bench", Workers: benchWorkers, BatchSize: 16, MaxK: 50},
		f.rdb, &testEmbedder{dims: benchDims}, f.store, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fd.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	c := NewClient(f.rdb, prefix)
	b.Cleanup(func() { _ = c.Close() })
	return fd, c, reg
}

// latencies collects per-request durations from parallel goroutines.
type latencies struct {
	mu  sync.Mutex
	all durations
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	if len(l.all) == 0 {
		return
	}
	b.ReportMetric(float64(len(l.all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(l.all.quantile(0.50), "p50_ms")
	b.ReportMetric(l.all.quantile(0.99), "p99_ms")
}

// parallel runs op from benchClients goroutines, recording
// the latency of each call.
func parallel(b *testing.B, op func(ctx context.Context, i int64) error) {
	var lat latencies
	var next atomic.Int64
	b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	cpu := startCPU(bench.rdb)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		ctx := context.Background()
		for pb.Next() {
			t0 := time.Now()
			if err := op(ctx, next.Add(1)); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		lat.add(local)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	lat.report(b, elapsed)
	cpu.report(b, len(lat.all))
}

// benchQuery is query i of the shared workload: 5 words, k=10.
func benchQuery(i int64) string {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	return benchText(r, 5)
}

func searchOK(ctx context.Context, c *Client, text string) error {
	res, err := c.Search(ctx, Query{Text: text, K: 10})
	if err != nil {
		return err
	}
	if res.Status != StatusOK {
		return fmt.Errorf("status %s: %s", res.Status, res.Reason)
	}
	return nil
}

// warmHits caches the answers of the hit workload's 100 distinct queries.
func warmHits(b *testing.B, c *Client) {
	b.Helper()
	for i := range int64(100) {
		if err := searchOK(context.Background(), c, benchQuery(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFrontDoorHit: 100 distinct queries, all cached before timing.
func BenchmarkFrontDoorHit(b *testing.B) {
	f := benchSetup(b)
	_, c, _ := startBenchFrontDoor(b, f)
	warmHits(b, c)
	parallel(b, func(ctx context.Context, i int64) error { return searchOK(ctx, c, benchQuery(i%100)) })
}

// BenchmarkFrontDoorMiss: every query is new (embed + pgvector through the
// front door).
func BenchmarkFrontDoorMiss(b *testing.B) {
	f := benchSetup(b)
	_, c, _ := startBenchFrontDoor(b, f)
	base := time.Now().UnixNano()
	parallel(b, func(ctx context.Context, i int64) error { return searchOK(ctx, c, benchQuery(base+i)) })
}

// BenchmarkDirectPgvector: the same workload without the front door: embed
// and query pgvector directly, as a client without a cache would.
func BenchmarkDirectPgvector(b *testing.B) {
	f := benchSetup(b)
	emb := &testEmbedder{dims: benchDims}
	parallel(b, func(ctx context.Context, i int64) error {
		v, err := emb.Embed(ctx, []string{benchQuery(i % 100)})
		if err != nil {
			return err
		}
		_, err = f.store.Search(ctx, v[0], sink.Query{K: 10})
		return err
	})
}

// BenchmarkFrontDoorZipf: queries drawn Zipf(s=1.1) from 10,000 distinct
// ones, the shape of real query logs; reports the cache hit ratio.
func BenchmarkFrontDoorZipf(b *testing.B) {
	f := benchSetup(b)
	fd, c, _ := startBenchFrontDoor(b, f)
	var mu sync.Mutex
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 9999)
	parallel(b, func(ctx context.Context, _ int64) error {
		mu.Lock()
		q := int64(z.Uint64())
		mu.Unlock()
		return searchOK(ctx, c, benchQuery(1_000_000+q))
	})
	m := fd.metrics.requests
	hits := testutil.ToFloat64(m.WithLabelValues(outcomeHit)) + testutil.ToFloat64(m.WithLabelValues(outcomeNegativeHit)) + testutil.ToFloat64(m.WithLabelValues(outcomeCoalesced))
	total := hits + testutil.ToFloat64(m.WithLabelValues(outcomeMiss))
	if total > 0 {
		b.ReportMetric(hits/total, "hit_ratio")
	}
}

// BenchmarkFrontDoorHitSerial: the hit path with one client at a time, i.e.
// the latency of a single request without queueing behind others.
func BenchmarkFrontDoorHitSerial(b *testing.B) {
	f := benchSetup(b)
	_, c, _ := startBenchFrontDoor(b, f)
	warmHits(b, c)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range int64(b.N) {
		t0 := time.Now()
		if err := searchOK(context.Background(), c, benchQuery(i%100)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	l := latencies{all: lat}
	l.report(b, elapsed)
}

// BenchmarkHitVsDirect interleaves the two workloads in 250ms slices (hit
// path through the front door, then direct embed + pgvector) so both see the
// same machine load — this box is shared, and running them minutes apart
// skews the ratio. Reports each side's req/s, p50/p99 and the ratio.
func BenchmarkHitVsDirect(b *testing.B) {
	f := benchSetup(b)
	_, c, _ := startBenchFrontDoor(b, f)
	warmHits(b, c)
	emb := &testEmbedder{dims: benchDims}
	hitOp := func(ctx context.Context, i int64) error { return searchOK(ctx, c, benchQuery(i%100)) }
	directOp := func(ctx context.Context, i int64) error {
		v, err := emb.Embed(ctx, []string{benchQuery(i % 100)})
		if err != nil {
			return err
		}
		_, err = f.store.Search(ctx, v[0], sink.Query{K: 10})
		return err
	}
	workers := benchClients * 2
	slice := func(op func(context.Context, int64) error, lat *latencies) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		var firstErr atomic.Value
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				local := make([]time.Duration, 0, 256)
				for i := int64(w); ctx.Err() == nil; i += int64(workers) {
					t0 := time.Now()
					if err := op(context.Background(), i); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					local = append(local, time.Since(t0))
				}
				lat.add(local)
			})
		}
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	var hit, direct latencies
	var hitTime, directTime time.Duration
	b.ResetTimer()
	for range b.N {
		d, err := slice(hitOp, &hit)
		if err != nil {
			b.Fatal(err)
		}
		hitTime += d
		if d, err = slice(directOp, &direct); err != nil {
			b.Fatal(err)
		}
		directTime += d
	}
	b.StopTimer()
	hitRate := float64(len(hit.all)) / hitTime.Seconds()
	directRate := float64(len(direct.all)) / directTime.Seconds()
	b.ReportMetric(hitRate, "hit_req/s")
	b.ReportMetric(directRate, "direct_req/s")
	b.ReportMetric(hitRate/directRate, "hit/direct")
	b.ReportMetric(hit.all.quantile(0.5), "hit_p50_ms")
	b.ReportMetric(hit.all.quantile(0.99), "hit_p99_ms")
	b.ReportMetric(direct.all.quantile(0.5), "direct_p50_ms")
	b.ReportMetric(direct.all.quantile(0.99), "direct_p99_ms")
}

// BenchmarkHitAtDirectX5 asks the two targets together: can the hit
// path serve five times the direct pgvector throughput, and at what p99? It
// measures the direct throughput D for a second (closed loop, like
// BenchmarkDirectPgvector), then offers hits open loop at 5×D for three
// seconds (see openLoop); BENCH_HIT_RATE=<req/s> offers that rate instead.
// Before the hits, the same driver at the same rate sends one Redis PING
// per request: that floor is what the driver and one round trip cost on
// this machine, in the same run, and the hit path's p99 reads against it.
func BenchmarkHitAtDirectX5(b *testing.B) {
	f := benchSetup(b)
	_, c, _ := startBenchFrontDoor(b, f)
	warmHits(b, c)
	emb := &testEmbedder{dims: benchDims}
	var direct atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	var wg sync.WaitGroup
	for w := range benchClients * 2 {
		wg.Go(func() {
			for i := int64(w); ctx.Err() == nil; i++ {
				v, err := emb.Embed(context.Background(), []string{benchQuery(i % 100)})
				if err == nil {
					_, err = f.store.Search(context.Background(), v[0], sink.Query{K: 10})
				}
				if err != nil {
					b.Error(err)
					return
				}
				direct.Add(1)
			}
		})
	}
	wg.Wait()
	cancel()
	directRate := float64(direct.Load())
	rate := 5 * directRate
	if r, err := strconv.ParseFloat(os.Getenv("BENCH_HIT_RATE"), 64); err == nil && r > 0 {
		// A fixed offered rate, for comparing two builds: the direct rate
		// moves with the machine's load from run to run.
		rate = r
	}

	b.ResetTimer()
	for range b.N {
		floor := openLoop(b, rate, time.Second, func(ctx context.Context, _ int64) error {
			return f.rdb.Ping(ctx).Err()
		})
		cpu := startCPU(f.rdb)
		hits := openLoop(b, rate, 3*time.Second, func(ctx context.Context, i int64) error {
			return searchOK(ctx, c, benchQuery(i%100))
		})
		b.ReportMetric(directRate, "direct_req/s")
		b.ReportMetric(rate, "offered_req/s")
		b.ReportMetric(float64(hits.n)/hits.elapsed.Seconds(), "req/s")
		b.ReportMetric(hits.fromDue.quantile(0.50), "p50_ms")
		b.ReportMetric(hits.fromDue.quantile(0.99), "p99_ms")
		b.ReportMetric(hits.fromSend.quantile(0.99), "sent_p99_ms")
		b.ReportMetric(hits.late.quantile(0.99), "late_p99_ms")
		b.ReportMetric(floor.fromDue.quantile(0.99), "ping_p99_ms")
		cpu.report(b, hits.n)
	}
}

// openRun is what openLoop saw: each request's latency from when it was due,
// from when it was sent, and how late the driver sent it.
type openRun struct {
	fromDue, fromSend, late durations
	n                       int
	elapsed                 time.Duration
}

type durations []time.Duration

// quantile in milliseconds; sorts d.
func (d durations) quantile(p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
}

// openLoop offers op at rate per second for length: request i is due at
// start + i/rate whatever happened before it, and fromDue counts from then,
// so a stall is charged to every request that queued behind it (no
// coordinated omission). Go sleeps shorter than a millisecond wake up to a
// millisecond late when the process is otherwise idle (the runtime's poller
// waits in whole milliseconds), so a driver that paces with timers adds that
// to fromDue; fromSend and late separate the two. With 64 senders and a few
// requests in flight, no sender waits for a slow reply before its next due
// time, so late is the timers' and the scheduler's, not the system's.
func openLoop(b *testing.B, rate float64, length time.Duration, op func(context.Context, int64) error) openRun {
	interval := time.Duration(float64(time.Second) / rate)
	n := int64(length.Seconds() * rate)
	var (
		mu   sync.Mutex
		run  openRun
		next atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			var due, sent, late durations
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				at := start.Add(time.Duration(i) * interval)
				time.Sleep(time.Until(at))
				t0 := time.Now()
				if err := op(context.Background(), i); err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				due, sent, late = append(due, t1.Sub(at)), append(sent, t1.Sub(t0)), append(late, t0.Sub(at))
			}
			mu.Lock()
			run.fromDue, run.fromSend, run.late = append(run.fromDue, due...), append(run.fromSend, sent...), append(run.late, late...)
			mu.Unlock()
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	run.n = len(run.fromDue)
	return run
}
