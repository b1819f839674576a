// Command reusefresh measures what the background repayment of reuse debt
// costs live changes: the freshness (time from a change's arrival to its
// commit) of a steady stream of edits, p50 and p99, with a large debt being
// repaid at the same time and without it. Both runs start from the same
// state (documents loaded, then each edited so that its chunk reuses a
// vector), in a schema each. The embedding provider is the offline hashing
// embedder behind a fixed latency per request and a concurrency limit (the
// provider's capacity), shared by the pipeline's live lane and the
// repayment's background lane exactly as serve shares it.
//
//	go run ./bench/reusefresh [-docs 400] [-changes 300] [-rate 15]
//
// It fails when p99 with the repayment is over -max-ratio (1.1) times p99
// without it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	mrand "math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

type config struct {
	url      string
	docs     int
	changes  int
	rate     float64
	latency  time.Duration
	capacity int
	maxRatio float64
	rounds   int
	window   time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.url, "postgres-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres with pgvector; schemas bench_fresh_* are created and dropped")
	flag.IntVar(&c.docs, "docs", 400, "documents loaded and then edited into reuse debt")
	flag.IntVar(&c.changes, "changes", 300, "live changes measured per run")
	flag.Float64Var(&c.rate, "rate", 15, "live changes per second")
	flag.DurationVar(&c.latency, "latency", 30*time.Millisecond, "the provider's latency per embedding request")
	flag.IntVar(&c.capacity, "capacity", 4, "embedding requests the provider serves at once")
	flag.Float64Var(&c.maxRatio, "max-ratio", 1.1, "fail when p99 with the repayment exceeds this times p99 without")
	flag.IntVar(&c.rounds, "rounds", 3, "measured pairs of runs (without, with); medians are reported")
	flag.DurationVar(&c.window, "window", 20*time.Second, "reuse.repay_window of the run: the debt is repaid at its rate across the measurement (changes ÷ rate = 20s by default), as serve spreads it over its window")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-reusefresh:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	var without, with []stats
	for round := 1; round <= c.rounds; round++ {
		for _, repay := range []bool{false, true} {
			s, err := measure(ctx, c, repay, uint64(round))
			if err != nil {
				return err
			}
			fmt.Printf("round %d repayment %-5v: freshness p50 %6.1fms p99 %6.1fms over %d changes; %d reused vectors repaid meanwhile, %d left\n",
				round, repay, ms(s.p50), ms(s.p99), s.n, s.repaid, s.left)
			if repay {
				with = append(with, s)
			} else {
				without = append(without, s)
			}
		}
	}
	p99 := func(ss []stats) time.Duration {
		xs := make([]time.Duration, len(ss))
		for i, s := range ss {
			xs[i] = s.p99
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	p50 := func(ss []stats) time.Duration {
		xs := make([]time.Duration, len(ss))
		for i, s := range ss {
			xs[i] = s.p50
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	ratio := float64(p99(with)) / float64(p99(without))
	fmt.Printf("medians of %d rounds: p50 %.1fms → %.1fms, p99 %.1fms → %.1fms with the repayment running: p99 ratio %.2f (target ≤ %.2f)\n",
		c.rounds, ms(p50(without)), ms(p50(with)), ms(p99(without)), ms(p99(with)), ratio, c.maxRatio)
	if ratio > c.maxRatio {
		return fmt.Errorf("p99 freshness with the repayment is %.2f× without it, over %.2f", ratio, c.maxRatio)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type stats struct {
	n        int
	p50, p99 time.Duration
	repaid   int
	left     int
}

// measure prepares a schema with reuse debt and streams live changes into
// it, with or without the repayment running.
func measure(ctx context.Context, c config, repay bool, seed uint64) (stats, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bench_fresh_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, c.url, schema)
	if err != nil {
		return stats{}, err
	}
	defer func() {
		pool.Close()
		dropSchema(c.url, schema)
	}()
	if err := migrations.Up(ctx, pool, schema, nil); err != nil {
		return stats{}, err
	}
	prov := &provider{h: embedder.NewHashing(256), latency: c.latency, slots: make(chan struct{}, c.capacity)}
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "fresh", Model: embedder.HashingModel, Dimensions: 256})
	if err != nil {
		return stats{}, err
	}
	texts := make([]string, c.docs)
	var msgs []cdc.Record
	for i := range texts {
		texts[i] = backlog.Para(seed*100000+uint64(i)) + "\n\n" + backlog.Para(seed*100000+uint64(i)+50000)
		msgs = append(msgs, debeziumtest.Message("docs", "c", i+1, int64(10*(i+1)), map[string]any{"body": texts[i]}))
	}
	// The debt: every document loses one word, which reuses its vector
	// (a predictor lenient enough to reuse it, as a trained model's is).
	reuse := pipeline.ReuseConfig{Predictor: pipeline.NewPredictor(0.5)}
	if err := apply(ctx, prov, st, reuse, msgs); err != nil {
		return stats{}, err
	}
	msgs = msgs[:0]
	for i, t := range texts {
		w := strings.Fields(t)
		edited := strings.Replace(t, w[len(w)/2]+" ", "", 1)
		msgs = append(msgs, debeziumtest.Message("docs", "u", i+1, int64(10*(i+1)+1), map[string]any{"body": edited}))
	}
	if err := apply(ctx, prov, st, reuse, msgs); err != nil {
		return stats{}, err
	}
	debt, err := st.OutstandingDebt(ctx, time.Now())
	if err != nil {
		return stats{}, err
	}
	if debt.Vectors < c.docs/2 {
		return stats{}, fmt.Errorf("set-up made %d reused vectors of %d documents; the measurement needs debt", debt.Vectors, c.docs)
	}

	lanes := pipeline.NewLanes(prov, 0)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rp *pipeline.Repayer
	var wg sync.WaitGroup
	reg := prometheus.NewRegistry()
	if repay {
		// A window as long as the measurement: the whole debt is repaid
		// while the live changes stream in.
		rp, err = pipeline.NewRepayer(pipeline.DebtConfig{Window: c.window, Interval: c.window / 10, Registerer: reg,
			Yield: lanes.Wait},
			st, lanes.Background())
		if err != nil {
			return stats{}, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = rp.Run(rctx) }()
	}
	// Each live change edits another document (so each commit is matched
	// to its change by the document's key), with text never seen before.
	rng := mrand.New(mrand.NewPCG(seed, 1))
	src := &steadySource{every: time.Duration(float64(time.Second) / c.rate), sent: map[string]time.Time{}}
	for i, k := range rng.Perm(c.docs)[:min(c.changes, c.docs)] {
		body := backlog.Para(seed*1000000 + uint64(i) + 900000)
		src.ids = append(src.ids, strconv.Itoa(k+1))
		src.msgs = append(src.msgs, debeziumtest.Message("docs", "u", k+1, int64(1_000_000+i), map[string]any{"body": body}))
	}
	src.msgs = cdc.DecodeAll(cdc.NewDecoder(cdc.DecoderConfig{}), src.msgs)
	rec := &recordingSink{Index: st, src: src}
	p, err := service.NewPipeline(pipelineConfig(reuse), service.Stages{
		Source: src, Target: pipeline.Target{Name: "fresh", Index: rec, Embedder: lanes.Live()},
	}, reuse.Predictor, nil, nil)
	if err != nil {
		return stats{}, err
	}
	err = p.Run(ctx)
	cancel()
	wg.Wait()
	if err != nil {
		return stats{}, err
	}
	left, err := st.OutstandingDebt(ctx, time.Now())
	if err != nil {
		return stats{}, err
	}
	lat := rec.latencies()
	slices.Sort(lat)
	s := stats{n: len(lat), left: left.Vectors, repaid: int(repaidVectors(reg))}
	if len(lat) == 0 {
		return s, errors.New("no change was applied")
	}
	s.p50, s.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	return s, nil
}

// repaidVectors reads ragsync_pipeline_debt_repaid_vectors_total.
func repaidVectors(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "ragsync_pipeline_debt_repaid_vectors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// pipelineConfig is the benchmark's pipeline: as serve builds it
// (service.NewPipeline), with four workers and reuse's settings.
func pipelineConfig(reuse pipeline.ReuseConfig) service.PipelineConfig {
	return service.PipelineConfig{Pipeline: pipeline.Config{Workers: 4, Reuse: reuse}}
}

func apply(ctx context.Context, emb pipeline.Embedder, st *sink.Store, reuse pipeline.ReuseConfig, msgs []cdc.Record) error {
	p, err := service.NewPipeline(pipelineConfig(reuse), service.Stages{
		Source: &listSource{msgs: cdc.DecodeAll(cdc.NewDecoder(cdc.DecoderConfig{}), msgs)}, Target: pipeline.Target{Name: "fresh", Index: st, Embedder: emb},
	}, reuse.Predictor, nil, nil)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// provider is the embedding API: the hashing embedder behind a latency
// per request and a limit on requests served at once.
type provider struct {
	h       *embedder.Hashing
	latency time.Duration
	slots   chan struct{}
}

func (p *provider) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.slots }()
	select {
	case <-time.After(p.latency):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.h.Embed(ctx, texts)
}

func (p *provider) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return p.Embed(ctx, texts)
}

// steadySource hands out one change every interval and remembers when.
type steadySource struct {
	every time.Duration
	msgs  []cdc.Record
	ids   []string // the document key of each message
	next  time.Time
	mu    sync.Mutex
	sent  map[string]time.Time // document key → handed out at
}

func (s *steadySource) Fetch(ctx context.Context) (cdc.Batch, error) {
	if len(s.msgs) == 0 {
		return cdc.Batch{}, io.EOF
	}
	if s.next.IsZero() {
		s.next = time.Now()
	}
	select {
	case <-time.After(time.Until(s.next)):
	case <-ctx.Done():
		return cdc.Batch{}, ctx.Err()
	}
	s.next = s.next.Add(s.every)
	m, id := s.msgs[0], s.ids[0]
	s.msgs, s.ids = s.msgs[1:], s.ids[1:]
	s.mu.Lock()
	s.sent[id] = time.Now()
	s.mu.Unlock()
	return cdc.Batch{Records: []cdc.Record{m}, Ack: func(context.Context) error { return nil }}, nil
}

// recordingSink records, per applied document, the time since its change
// was handed out.
type recordingSink struct {
	pipeline.Index
	src *steadySource
	mu  sync.Mutex
	lat []time.Duration
}

func (r *recordingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	out, err := r.Index.Upsert(ctx, d)
	if err == nil && out.Applied {
		r.src.mu.Lock()
		at, ok := r.src.sent[d.Key]
		r.src.mu.Unlock()
		if ok {
			r.mu.Lock()
			r.lat = append(r.lat, time.Since(at))
			r.mu.Unlock()
		}
	}
	return out, err
}

func (r *recordingSink) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lat)
}

type listSource struct{ msgs []cdc.Record }

func (s *listSource) Fetch(context.Context) (cdc.Batch, error) {
	if len(s.msgs) == 0 {
		return cdc.Batch{}, io.EOF
	}
	n := min(64, len(s.msgs))
	b := s.msgs[:n]
	s.msgs = s.msgs[n:]
	return cdc.Batch{Records: b, Ack: func(context.Context) error { return nil }}, nil
}

func dropSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-reusefresh: drop schema %s: %v\n", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "bench-reusefresh: drop schema %s: %v\n", schema, err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ReportedModel is the hashing embedder's (it has no provider to report).
func (p *provider) ReportedModel() string { return p.h.ReportedModel() }
