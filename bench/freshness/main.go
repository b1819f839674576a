// Command freshness measures how long after a source commit a change is
// searchable: Debezium change events are produced to an in-process Kafka
// (kfake) at fixed rates, each stamped with its commit time (source.ts_ms),
// and consumed by the pipeline (Kafka source, coalesced OpenAI-compatible
// embedder against a fake with a fixed latency, Postgres/pgvector sink). For
// each rate it reports p50/p95/p99 of commit-to-index-commit time over the
// documents applied after a warm-up, and the applied rate against the
// offered one.
//
//	go run ./bench/freshness -rates 5,50 -latency 150ms -duration 30s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

type options struct {
	url        string
	rates      []float64
	latency    time.Duration
	duration   time.Duration
	warmup     time.Duration
	docs       int
	partitions int
	dims       int
	workers    int
}

func main() {
	var o options
	var rates string
	flag.StringVar(&o.url, "url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres to index into (a schema is created and dropped)")
	flag.StringVar(&rates, "rates", "5,50", "offered changes/s, comma-separated")
	flag.DurationVar(&o.latency, "latency", 150*time.Millisecond, "the fake provider's latency per request")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measured time per rate (after the warm-up)")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "time per rate before measuring")
	flag.IntVar(&o.docs, "docs", 500, "documents the changes are spread over")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of the topic")
	flag.IntVar(&o.dims, "dims", 256, "embedding dimensions")
	flag.IntVar(&o.workers, "workers", 0, "pipeline.workers (0: the pipeline's default); 32 reproduces serve's former default with a remote provider")
	cpuProfile := flag.String("cpu-profile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	for _, r := range strings.Split(rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			fatalf("-rates: %q is not a positive number", r)
		}
		o.rates = append(o.rates, v)
	}
	fmt.Printf("freshness through Kafka (kfake), provider latency %s, 1.5-4 KB documents over %d documents, %d partitions\n", o.latency, o.docs, o.partitions)
	fmt.Println("| changes/s | p50 | p95 | p99 | applied/s | applied/offered |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, rate := range o.rates {
		r, err := run(context.Background(), o, rate)
		if err != nil {
			warnf("rate %g: %v", rate, err)
			return
		}
		fmt.Println(r)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type result struct {
	rate          float64
	p50, p95, p99 time.Duration
	applied       float64
}

func (r result) String() string {
	return fmt.Sprintf("| %g | %d ms | %d ms | %d ms | %.1f | %.2f |", r.rate, r.p50.Milliseconds(), r.p95.Milliseconds(), r.p99.Milliseconds(), r.applied, r.applied/r.rate)
}

// timingSink records, for every applied upsert, the time from the change's
// source commit to the return of the sink's commit.
type timingSink struct {
	pipeline.Sink
	mu    sync.Mutex
	from  time.Time // only changes committed after from count
	lat   []time.Duration
	count int
}

func (s *timingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	out, err := s.Sink.Upsert(ctx, d)
	if err == nil && out.Applied {
		now := time.Now()
		s.mu.Lock()
		if !s.from.IsZero() && d.SourceTS.After(s.from) {
			s.lat = append(s.lat, now.Sub(d.SourceTS))
			s.count++
		}
		s.mu.Unlock()
	}
	return out, err
}

type tbShim struct {
	testing.TB
	cleanups []func()
}

func (s *tbShim) Helper()          {}
func (s *tbShim) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

var words = strings.Fields("harbour lighthouse glacier orchard valley river meadow granite ferry tide market lantern bridge quarry " +
	"canal spire beacon willow heron cobble pier mill forge thatch reef dune marsh summit hollow grove basin")

func text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		for range 12 {
			b.WriteString(words[mrand.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteString(".\n\n")
	}
	return b.String()
}

func run(ctx context.Context, o options, rate float64) (result, error) {
	res := result{rate: rate}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "bench_fresh_" + hex.EncodeToString(rb[:])
	pool, err := sink.OpenPool(ctx, o.url, schema)
	if err != nil {
		return res, err
	}
	defer func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}()
	if err := migrations.Up(ctx, pool, schema, slog.New(slog.DiscardHandler)); err != nil {
		return res, err
	}
	shim := &tbShim{}
	srv := openaitest.New(shim, openaitest.Options{Dimensions: o.dims})
	defer func() {
		for i := len(shim.cleanups) - 1; i >= 0; i-- {
			shim.cleanups[i]()
		}
	}()
	if o.latency > 0 {
		srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: o.latency} })
	}
	ecfg := embedder.Config{Provider: embedder.ProviderOpenAI, BaseURL: srv.URL, Model: "text-embedding-3-small", Dimensions: o.dims, APIKey: "bench"}.WithDefaults()
	client, err := embedder.NewOpenAI(ecfg)
	if err != nil {
		return res, err
	}
	co := embedder.NewCoalescer(client, ecfg.Coalesce())
	defer co.Close()
	st, err := sink.New(ctx, pool, sink.Config{Schema: schema, Index: "bench", Model: ecfg.Model, Dimensions: o.dims, SkipFullText: true})
	if err != nil {
		return res, err
	}
	ch, err := chunker.New(chunker.Config{}.WithDefaults())
	if err != nil {
		return res, err
	}

	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), topic))
	if err != nil {
		return res, err
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "bench"})
	if err != nil {
		return res, err
	}
	defer src.Close()

	ts := &timingSink{Sink: st}
	p, err := pipeline.New(pipeline.Config{Workers: o.workers}, pipeline.Stages{
		Source: src, Decoder: cdc.NewDecoder(cdc.DecoderConfig{}), Splitter: ch,
		Embedder: co, Sink: ts, Cache: st, Lookup: st,
	})
	if err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()

	// Produce at the offered rate: each change is committed "now" in the
	// source (its ts_ms) and produced at once, as Debezium would.
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)
	ts.mu.Lock()
	ts.from = measureFrom
	ts.mu.Unlock()
	var lsn int64
	offered := 0
	next := start
	for time.Now().Before(end) {
		lsn++
		id := mrand.IntN(o.docs)
		now := time.Now()
		value, _ := json.Marshal(map[string]any{
			"op": "u",
			"source": map[string]any{"connector": "postgresql", "schema": "public", "table": "articles",
				"lsn": lsn, "txId": lsn, "ts_ms": now.UnixMilli()},
			"after": map[string]any{"id": id, "body": text(1500 + mrand.IntN(2500))},
		})
		prod.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, `{"id":%d}`, id), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				warnf("produce: %v", err)
			}
		})
		if now.After(measureFrom) {
			offered++
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	// Let the last changes land, then stop.
	time.Sleep(2 * time.Second)
	stop()
	if err := <-ran; err != nil {
		return res, err
	}
	ts.mu.Lock()
	lat := slices.Clone(ts.lat)
	ts.mu.Unlock()
	if len(lat) == 0 {
		return res, fmt.Errorf("nothing applied in the measured window")
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(math.Ceil(f*float64(len(lat))))-1)] }
	res.p50, res.p95, res.p99 = q(0.50), q(0.95), q(0.99)
	// Applied in the window: changes committed in it that reached the
	// index (a change overtaken by a later one of its document counts as
	// applied only if its write happened).
	res.applied = float64(len(lat)) / o.duration.Seconds()
	_ = offered
	return res, nil
}

// fatalf prints a bench failure and exits 1; warnf prints a problem the run
// goes on after. Benchmarks print to stderr, like the other benches, not
// through the log package (the redaction test forbids it everywhere).
func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-freshness: "+format+"\n", args...)
	os.Exit(1)
}

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-freshness: "+format+"\n", args...)
}
