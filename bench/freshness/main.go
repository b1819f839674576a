// Command freshness measures how long after a source commit a change is
// searchable, through each of two sources:
//
//   - kafka: Debezium change events are produced to an in-process Kafka
//     (kfake) at fixed rates, each stamped with its commit time
//     (source.ts_ms), and consumed by the Kafka source;
//   - postgres: rows are committed into a table of their own at fixed rates
//     and streamed from a replication slot of their own by the Postgres
//     source (source.kind postgres), each change stamped with its commit
//     time by pgoutput (the server's clock).
//
// Both feed the same pipeline (coalesced OpenAI-compatible embedder against
// a fake with a fixed latency, Postgres/pgvector sink), in this process. For
// each source and rate it reports p50/p95/p99 of commit-to-index-commit time
// (the return of the sink's commit of the document's chunks and vectors)
// over the changes committed after a warm-up, and the applied rate against
// the offered one. The warm-up starts once the pipeline has applied a first
// change. Applied counts the window's changes that reached the index 2 s
// after it; freshness waits longer, until all of them did or for half the
// window, and counts a change still queued then at a lower bound (the
// quantiles are then marked ≥). The postgres leg creates its schema,
// publication and slot and drops them at the end.
//
// With -curve it instead raises the rate through each source until one is
// not sustained. A rate is sustained when applied ≥ 0.95 × offered
// (-curve-sustain) and the queue does not grow: the p50 freshness of the
// changes committed in the last third of the measured window is at most
// 1.5 × (-curve-growth) the p50 of those committed in its first third. It
// prints both criteria per rate, the highest steady rate, and p99 at 80%
// of it.
// -metadata measures, through kafka and postgres-pipeline (at 50/s unless
// -rates says otherwise), each rate twice with rows whose status column the
// text does not render and a declared field does (fields: semantic_tag:
// "{{status}}"): text edits as above, then updates of the status alone,
// timed to the sink's commit and to the new value being filterable (a
// probe polls the index's view for metadata @> {"semantic_tag": <new>} on
// the document), with the count of writes that took the metadata-only path.
//
// -curve-drain N first drains a Kafka backlog of N changes made the same
// way (the same documents, change mix, sizes, provider latency and pipeline
// settings) and reports the highest steady rate ÷ that drain rate: what
// flowing at a fixed rate costs against draining the same work as a
// backlog.
//
//	go run ./bench/freshness -sources kafka,postgres -rates 5,50 -latency 150ms -duration 30s
//	go run ./bench/freshness -metadata -duration 30s
//	go run ./bench/freshness -sources kafka -curve -curve-from 25 -curve-factor 1.5 -duration 60s -curve-drain 20000
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

type options struct {
	bin        string
	url        string
	sources    []string
	rates      []float64
	latency    time.Duration
	duration   time.Duration
	warmup     time.Duration
	docs       int
	partitions int
	dims       int
	workers    int
	// inFlightBytes and inFlightDocs are pipeline.max_in_flight_bytes and
	// max_in_flight_documents (0: the pipeline's defaults).
	inFlightBytes, inFlightDocs int
	// groups and groupDocs are the sink's concurrent group transactions
	// and documents per group (0: the sink's defaults).
	groups, groupDocs int
	// timeline prints, per second of source commits, how many changes
	// were applied and their worst freshness: where a high p99 comes from.
	timeline bool
	// metadata: the rows carry a status column the text does not render
	// and a declared field renders (metadataTables), and each rate is
	// measured twice, with text edits and with status-only updates (see
	// runMetadata).
	metadata bool
	// probeEvery is how often the metadata leg's probe polls the index.
	probeEvery time.Duration
}

func main() {
	var o options
	var rates, sources string
	flag.StringVar(&sources, "sources", "kafka,postgres-pipeline,postgres", "sources to measure through, comma-separated: kafka (kfake into the pipeline in this process), postgres-pipeline (a replication slot into the pipeline in this process), postgres (a replication slot into `ragsync serve`, a child process)")
	flag.StringVar(&o.bin, "bin", "bin/ragsync", "the ragsync binary the postgres source's serve runs")
	flag.StringVar(&o.url, "url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres to index into (a schema is created and dropped)")
	flag.StringVar(&rates, "rates", "5,50", "offered changes/s, comma-separated")
	flag.DurationVar(&o.latency, "latency", 150*time.Millisecond, "the fake provider's latency per request")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measured time per rate (after the warm-up)")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "time per rate before measuring")
	flag.IntVar(&o.docs, "docs", 500, "documents the changes are spread over")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of the topic")
	flag.IntVar(&o.dims, "dims", 256, "embedding dimensions")
	flag.IntVar(&o.workers, "workers", 0, "pipeline.workers (0: the pipeline's default); 32 reproduces serve's former default with a remote provider")
	flag.IntVar(&o.inFlightBytes, "max-in-flight-bytes", 0, "pipeline.max_in_flight_bytes (0: the pipeline's default)")
	flag.IntVar(&o.inFlightDocs, "max-in-flight-documents", 0, "pipeline.max_in_flight_documents (0: the pipeline's default)")
	flag.IntVar(&o.groups, "groups", 0, "in-process legs: group transactions writing at once (0: the sink's default, half the pool's connections)")
	flag.IntVar(&o.groupDocs, "group-documents", 0, "in-process legs: documents per group transaction (0: the sink's default)")
	flag.BoolVar(&o.timeline, "timeline", false, "after each in-process rate, print per second of source commits the changes applied and their median and worst freshness (where a p99 comes from)")
	flag.BoolVar(&o.metadata, "metadata", false, "through kafka and postgres-pipeline, measure each rate twice: text edits, then updates of only a column the text does not render that a declared field (semantic_tag: \"{{status}}\") renders, timed to the sink's commit and to the new value being filterable (metadata @> {\"semantic_tag\": …} on the index's view); -rates defaults to 50, -sources to kafka,postgres-pipeline")
	flag.DurationVar(&o.probeEvery, "probe-interval", 10*time.Millisecond, "-metadata: how often the probe queries the index for changes not yet filterable (the filterable times are late by up to this much)")
	cpuProfile := flag.String("cpu-profile", "", "write a CPU profile of the whole run to this file")
	afterTries := flag.Int("after", 0, "instead of -sources, measure reading one's own writes through `ragsync serve` on the Postgres source: this many changes at the first of -rates, each followed by a wait for the watermark to pass its pg_current_wal_lsn() and a search for it")
	var curve bool
	var cur curveOptions
	flag.BoolVar(&curve, "curve", false, "instead of -rates, raise the rate until one is not sustained (applied < -curve-sustain × offered, or the p50 of the last third of the window > -curve-growth × the first third's); report both criteria per rate, the highest steady rate and p99 at 80% of it")
	flag.Float64Var(&cur.from, "curve-from", 25, "-curve: the first rate (changes/s)")
	flag.Float64Var(&cur.factor, "curve-factor", 1.5, "-curve: each rate is this times the last")
	flag.Float64Var(&cur.limit, "curve-limit", 5000, "-curve: the highest rate tried")
	flag.Float64Var(&cur.sustain, "curve-sustain", 0.95, "-curve: applied ÷ offered a rate needs to count as sustained")
	flag.Float64Var(&cur.growth, "curve-growth", 1.5, "-curve: the most the p50 freshness of the changes committed in the last third of the window may be, as a multiple of the first third's, for a rate to count as sustained (a higher one: the queue grows)")
	flag.IntVar(&cur.refine, "curve-refine", 0, "-curve: after the first rate not sustained, halve the gap between it and the last rate sustained this many times")
	flag.IntVar(&cur.drain, "curve-drain", 0, "-curve through kafka: first drain a backlog of this many changes made as the curve's (same documents, change mix, provider latency and pipeline settings), and report the highest steady rate ÷ that drain rate (like for like)")
	flag.Parse()
	if o.metadata {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rates"] {
			rates = "50"
		}
		if !set["sources"] {
			sources = "kafka,postgres-pipeline"
		}
		if curve {
			fatalf("-metadata: not with -curve")
		}
	}
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
	for _, src := range strings.Split(sources, ",") {
		src = strings.TrimSpace(src)
		if !slices.Contains([]string{"kafka", "postgres", "postgres-pipeline"}, src) {
			fatalf("-sources: %q is none of kafka, postgres, postgres-pipeline", src)
		}
		if o.metadata && src == "postgres" {
			fatalf("-metadata: measured through kafka and postgres-pipeline only (the probe needs the sink's writes in this process)")
		}
		o.sources = append(o.sources, src)
	}
	failed := false
	if *afterTries > 0 {
		if err := runAfter(context.Background(), o, o.rates[0], *afterTries); err != nil {
			fatalf("-after: %v", err)
		}
		return
	}
	if curve {
		if cur.from <= 0 || cur.factor <= 1 || cur.sustain <= 0 || cur.growth < 1 {
			fatalf("-curve: want -curve-from > 0, -curve-factor > 1, -curve-sustain > 0 and -curve-growth ≥ 1")
		}
		for _, src := range o.sources {
			if err := runCurve(context.Background(), o, src, cur); err != nil {
				warnf("%s: %v", src, err)
				failed = true
			}
		}
		if failed {
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	if o.metadata {
		for _, src := range o.sources {
			if err := runMetadata(context.Background(), o, src); err != nil {
				warnf("%s: %v", src, err)
				failed = true
			}
		}
		if failed {
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	for _, src := range o.sources {
		switch src {
		case "kafka":
			fmt.Printf("freshness through Kafka (kfake) into the pipeline in this process, provider latency %s, 1.5-4 KB documents over %d documents, %d partitions; exact quantiles\n", o.latency, o.docs, o.partitions)
		case "postgres-pipeline":
			fmt.Printf("freshness through the Postgres source (a replication slot; pgoutput commit timestamps, one transaction per change) into the pipeline in this process, provider latency %s, 1.5-4 KB documents over %d documents; exact quantiles\n", o.latency, o.docs)
		case "postgres":
			fmt.Printf("freshness through the Postgres source (a replication slot; pgoutput commit timestamps, one transaction per change) into `ragsync serve` (%s, a child process), provider latency %s, 1.5-4 KB documents over %d documents; quantiles interpolated in serve's ragsync_pipeline_freshness_seconds buckets\n", o.bin, o.latency, o.docs)
		}
		fmt.Println("| changes/s | p50 | p95 | p99 | applied/s | applied/offered | chunk rows/s |")
		fmt.Println("|---|---|---|---|---|---|---|")
		for _, rate := range o.rates {
			var r result
			var err error
			if src == "postgres" {
				r, err = runServe(context.Background(), o, rate)
			} else {
				r, err = run(context.Background(), o, src, rate, 0)
			}
			if err != nil {
				warnf("%s, rate %g: %v", src, rate, err)
				failed = true
				break
			}
			fmt.Println(r)
		}
	}
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
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
	// chunks is chunk rows inserted per second in the window (0: not
	// counted, as through serve), to set against the raw HNSW insert
	// limit of make bench-throughput.
	chunks float64
	// metadataOnly counts the measured changes written as metadata-only
	// updates.
	metadataOnly int
	// -metadata's probe: of committed status changes (less those a later
	// change of their document overtook), filterable were found by it,
	// after f50/f95/f99.
	committed, filterable int
	f50, f95, f99         time.Duration
	// thirds: first and last are the p50s of the first and last thirds of
	// the window, growth last ÷ first (see window.stats); censored counts
	// the changes still queued when watching ended.
	thirds      bool
	first, last time.Duration
	growth      float64
	censored    int
}

func (r result) String() string {
	chunks := "—"
	if r.chunks > 0 {
		chunks = fmt.Sprintf("%.0f", r.chunks)
	}
	// Quantiles that count changes still queued at a lower bound.
	ge := ""
	if r.censored > 0 {
		ge = "≥ "
	}
	return fmt.Sprintf("| %g | %s%d ms | %s%d ms | %s%d ms | %.1f | %.2f | %s |", r.rate, ge, r.p50.Milliseconds(), ge, r.p95.Milliseconds(), ge, r.p99.Milliseconds(), r.applied, r.applied/r.rate, chunks)
}

// timingSink records, for every applied upsert, the time from the change's
// source commit to the return of the sink's commit.
type timingSink struct {
	pipeline.Index
	mu   sync.Mutex
	from time.Time // only changes committed at or after from count
	// firstAt is when the first upsert of all (measured or not) was
	// applied: the pipeline is up.
	firstAt time.Time
	lat     []time.Duration
	at      []time.Time // each lat's source commit
	count   int
	// inserted counts the chunk rows the measured changes inserted.
	inserted int
	// metadataOnly counts the measured changes written as metadata-only
	// updates (no chunk row, no vector touched).
	metadataOnly int
}

func (s *timingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	out, err := s.Index.Upsert(ctx, d)
	if err == nil && out.Applied {
		now := time.Now()
		s.mu.Lock()
		if s.firstAt.IsZero() {
			s.firstAt = now
		}
		if !s.from.IsZero() && !d.SourceTS.Before(s.from) {
			s.lat = append(s.lat, now.Sub(d.SourceTS))
			s.at = append(s.at, d.SourceTS)
			s.count++
			s.inserted += out.Inserted
			if out.MetadataOnly {
				s.metadataOnly++
			}
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

// fakeProvider starts the OpenAI-compatible fake embedding server, every
// answer delayed by the provider latency -latency sets; stop stops it.
func fakeProvider(o options) (srv *openaitest.Server, stop func()) {
	shim := &tbShim{}
	srv = openaitest.New(shim, openaitest.Options{Dimensions: o.dims})
	if o.latency > 0 {
		srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: o.latency} })
	}
	return srv, func() {
		for i := len(shim.cleanups) - 1; i >= 0; i-- {
			shim.cleanups[i]()
		}
	}
}

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

// bench is one in-process leg set up: the index's schema, the pipeline
// reading the source into it through the timing sink, and the functions
// that commit changes in the source.
type bench struct {
	schema string
	pool   *pgxpool.Pool
	ts     *timingSink
	p      *pipeline.Pipeline
	// commit commits a new text of document id (its status unchanged).
	commit func(ctx context.Context, id int, body string, now time.Time) error
	// setStatus commits a new status of document id (its text unchanged)
	// and returns the time the change counts from: its commit time in the
	// source as far as this process can tell.
	setStatus func(ctx context.Context, id int, status string, now time.Time) (time.Time, error)
	flush     func(ctx context.Context) error
	// table is the source table's name as documents record it.
	table string
}

// metadataTables is how -metadata renders rows: the text is the body
// alone, and the status column, which the text does not render, is the
// declared field semantic_tag.
var metadataTables = []pipeline.TableConfig{{Match: "*.articles", ID: []string{"id"}, Text: "{{body}}",
	Fields: map[string]string{"semantic_tag": "{{status}}"}}}

// setUp creates an index in a schema of its own and the source of leg, and
// builds the pipeline between them as serve builds its own; closing undoes
// it all.
func setUp(ctx context.Context, o options, leg string) (b *bench, closing func(), err error) {
	var undo []func()
	closing = func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	defer func() {
		if err != nil {
			closing()
		}
	}()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	b = &bench{schema: "bench_fresh_" + hex.EncodeToString(rb[:])}
	if b.pool, err = sink.OpenPool(ctx, o.url, b.schema); err != nil {
		return nil, nil, err
	}
	undo = append(undo, func() {
		_, _ = b.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE")
		b.pool.Close()
	})
	if err := migrations.Up(ctx, b.pool, b.schema, slog.New(slog.DiscardHandler)); err != nil {
		return nil, nil, err
	}
	srv, closeSrv := fakeProvider(o)
	undo = append(undo, closeSrv)
	ecfg := embedder.Config{Provider: embedder.ProviderOpenAI, BaseURL: srv.URL, Model: "text-embedding-3-small", Dimensions: o.dims, APIKey: "bench"}.WithDefaults()
	client, err := embedder.NewOpenAI(ecfg)
	if err != nil {
		return nil, nil, err
	}
	co := embedder.NewCoalescer(client, ecfg.Coalesce())
	undo = append(undo, co.Close)
	st, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "bench", Model: ecfg.Model, Dimensions: o.dims, SkipFullText: true,
		Groups: o.groups, GroupDocuments: o.groupDocs})
	if err != nil {
		return nil, nil, err
	}

	var src pipeline.Source
	b.flush = func(context.Context) error { return nil }
	if leg == "kafka" {
		ks, produce, setStatus, flushKafka, closeKafka, err := kafkaLeg(o)
		if err != nil {
			return nil, nil, err
		}
		undo = append(undo, closeKafka)
		src, b.commit, b.setStatus, b.flush, b.table = ks, produce, setStatus, flushKafka, "public.articles"
	} else {
		ps, name, write, setStatus, closePG, err := postgresLeg(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		undo = append(undo, closePG)
		src, b.commit, b.setStatus, b.table = ps, write, setStatus, name+".articles"
	}

	b.ts = &timingSink{Index: st}
	// Built as serve builds its pipeline.
	pc := service.PipelineConfig{
		Pipeline: pipeline.Config{Workers: o.workers, MaxInFlightBytes: o.inFlightBytes, MaxInFlightDocuments: o.inFlightDocs},
		Chunker:  chunker.Config{}.WithDefaults(),
	}
	if o.metadata {
		pc.Pipeline.Tables = metadataTables
	}
	if b.p, err = service.NewPipeline(pc, service.Stages{Source: src, Target: pipeline.Target{Name: "bench", Index: b.ts, Embedder: co}}, nil, nil, nil); err != nil {
		return nil, nil, err
	}
	return b, closing, nil
}

// run measures leg at rate; with drain > 0 it instead drains a backlog
// of drain changes (see drainBacklog).
func run(ctx context.Context, o options, leg string, rate float64, drain int) (result, error) {
	res := result{rate: rate}
	b, closing, err := setUp(ctx, o, leg)
	if err != nil {
		return res, err
	}
	defer closing()
	p, ts, commit, flush := b.p, b.ts, b.commit, b.flush
	if drain > 0 {
		return drainBacklog(ctx, o, p, ts, commit, flush, drain)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	fail := func(err error) (result, error) {
		stop()
		<-ran
		return res, err
	}
	// The warm-up starts once the pipeline has applied a change: joining
	// the consumer group and opening connections can take longer than the
	// warm-up, and would otherwise land in the first third and hide a
	// growing queue behind a slow start.
	if err := prime(ctx, b); err != nil {
		return fail(err)
	}

	var committed []time.Time
	recorded := func(ctx context.Context, id int, body string, now time.Time) error {
		if err := commit(ctx, id, body, now); err != nil {
			return err
		}
		// As the source records it: Debezium's ts_ms and pgoutput's
		// commit time reach the sink in whole milliseconds.
		committed = append(committed, now.Truncate(time.Millisecond))
		return nil
	}
	from, err := drive(ctx, o, rate, recorded, func(from time.Time) {
		ts.mu.Lock()
		ts.from = from
		ts.mu.Unlock()
	})
	if err != nil {
		return fail(err)
	}
	committed = slices.DeleteFunc(committed, func(t time.Time) bool { return t.Before(from) })
	// Applied is counted 2 s after the window: changes committed in it
	// that reached the index by then (a change overtaken by a later one
	// of its document counts as applied only if its write happened).
	time.Sleep(2 * time.Second)
	ts.mu.Lock()
	appliedBy := len(ts.lat)
	ts.mu.Unlock()
	// Freshness is watched longer, until every change of the window is
	// applied or for up to half the window: a queue that grew has its
	// slowest changes at the end, and they must count.
	settle := time.Now().Add(o.duration / 2)
	for {
		ts.mu.Lock()
		n := len(ts.lat)
		ts.mu.Unlock()
		if n >= len(committed) || !time.Now().Before(settle) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.mu.Lock()
	w := window{from: from, length: o.duration, committed: committed, at: slices.Clone(ts.at), lat: slices.Clone(ts.lat), stop: time.Now()}
	inserted := ts.inserted
	res.metadataOnly = ts.metadataOnly
	if o.timeline {
		printTimeline(ts.at, ts.lat)
	}
	ts.mu.Unlock()
	stop()
	if err := <-ran; err != nil {
		return res, err
	}
	if len(w.lat) == 0 {
		return res, fmt.Errorf("nothing applied in the measured window")
	}
	st := w.stats()
	res.p50, res.p95, res.p99 = st.p50, st.p95, st.p99
	res.thirds, res.first, res.last, res.growth, res.censored = true, st.first, st.last, st.growth, st.censored
	res.applied = float64(appliedBy) / o.duration.Seconds()
	res.chunks = float64(inserted) / o.duration.Seconds()
	return res, nil
}

// prime commits one change and waits until the pipeline has applied it.
func prime(ctx context.Context, b *bench) error {
	if err := b.commit(ctx, 0, text(1500), time.Now()); err != nil {
		return fmt.Errorf("prime: %w", err)
	}
	if err := b.flush(ctx); err != nil {
		return fmt.Errorf("prime: %w", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		b.ts.mu.Lock()
		up := !b.ts.firstAt.IsZero()
		b.ts.mu.Unlock()
		if up {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prime: the pipeline applied nothing in 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// printTimeline prints, per second of source commits, the changes applied
// and their median and worst freshness.
func printTimeline(at []time.Time, lat []time.Duration) {
	if len(at) == 0 {
		return
	}
	first := slices.MinFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var secs [][]time.Duration
	for i, t := range at {
		k := int(t.Sub(first) / time.Second)
		for len(secs) <= k {
			secs = append(secs, nil)
		}
		secs[k] = append(secs[k], lat[i])
	}
	fmt.Println("  second | applied | p50 | max")
	for k, ls := range secs {
		if len(ls) == 0 {
			fmt.Printf("  %6d | 0 | - | -\n", k)
			continue
		}
		slices.Sort(ls)
		fmt.Printf("  %6d | %d | %d ms | %d ms\n", k, len(ls), ls[len(ls)/2].Milliseconds(), ls[len(ls)-1].Milliseconds())
	}
}

// drainBacklog measures the ceiling the curve is held against with the
// curve's own work, so that highest steady rate ÷ drain rate compares like
// with like and measures only what flowing at a fixed rate costs: n
// changes are made by drive's generator (the same documents, the same
// change mix — each a rewrite of a random one of o.docs documents with a
// fresh 1.5–4 KB text — and the same Debezium shape), committed to the
// source before the pipeline starts, and drained by a pipeline that setUp
// built as for a rate (the same provider latency, coalescer, pipeline and
// sink settings, partitions and a fresh index). The clock starts when the
// first change is applied, as a rate's warm-up starts only once the
// pipeline has applied one (see prime): joining the consumer group is
// start-up, not throughput. The result's applied is changes processed per
// second from then to the last; chunks is chunk rows written per second.
func drainBacklog(ctx context.Context, o options, p *pipeline.Pipeline, ts *timingSink,
	commit func(context.Context, int, string, time.Time) error, flush func(context.Context) error, n int) (result, error) {
	ts.mu.Lock()
	ts.from = time.Now().Add(-time.Second)
	ts.mu.Unlock()
	for range n {
		if err := commit(ctx, mrand.IntN(o.docs), text(1500+mrand.IntN(2500)), time.Now()); err != nil {
			return result{}, err
		}
	}
	if err := flush(ctx); err != nil {
		return result{}, fmt.Errorf("flush the backlog: %w", err)
	}
	processed := func() int {
		done := 0
		for k, v := range p.Stats() {
			if strings.HasPrefix(k, "op_") {
				done += v
			}
		}
		return done
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	start := time.Now()
	go func() { ran <- p.Run(runCtx) }()
	last, lastAt := 0, start
	for {
		done := processed()
		if done >= n {
			break
		}
		if done > last {
			last, lastAt = done, time.Now()
		}
		if time.Since(lastAt) > 2*time.Minute {
			stop()
			<-ran
			return result{}, fmt.Errorf("drain stalled at %d of %d changes", done, n)
		}
		select {
		case err := <-ran:
			return result{}, fmt.Errorf("pipeline stopped after %d of %d changes: %v", processed(), n, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	end := time.Now()
	stop()
	if err := <-ran; err != nil {
		return result{}, err
	}
	ts.mu.Lock()
	inserted, firstAt := ts.inserted, ts.firstAt
	ts.mu.Unlock()
	if firstAt.IsZero() || n < 2 {
		return result{}, fmt.Errorf("drain: want at least 2 changes applied")
	}
	// The first change applied starts the clock: n-1 changes after it.
	elapsed := end.Sub(firstAt).Seconds()
	rate := float64(n-1) / elapsed
	return result{rate: rate, applied: rate, chunks: float64(inserted) / elapsed}, nil
}

// drive commits changes at rate for the warm-up and o.duration: through
// Kafka each is committed "now" in the source (its ts_ms) and produced at
// once, as Debezium would; through the Postgres source each is a
// transaction of its own. measure is called with the time measuring starts
// before any change is committed (only later commits count).
func drive(ctx context.Context, o options, rate float64, commit func(context.Context, int, string, time.Time) error, measure func(from time.Time)) (time.Time, error) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	// A whole millisecond, as the commit times the sink sees are.
	measureFrom := start.Add(o.warmup).Truncate(time.Millisecond)
	end := measureFrom.Add(o.duration)
	measure(measureFrom)
	next := start
	for time.Now().Before(end) {
		id := mrand.IntN(o.docs)
		if err := commit(ctx, id, text(1500+mrand.IntN(2500)), time.Now()); err != nil {
			return measureFrom, err
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	return measureFrom, nil
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

// kafkaLeg starts an in-process Kafka with the topic and returns the Kafka
// source, a function that produces a change of document id (committed in
// the source at now: its ts_ms) as Debezium would, and a closer.
//
// Debezium's events carry the whole row, so the leg keeps each document's
// body and status: a text change carries the status as it was, and a
// status change (setStatus) the body as it was, as an UPDATE of one column
// would. The status is left out of rows that never had one.
func kafkaLeg(o options) (pipeline.Source, func(context.Context, int, string, time.Time) error,
	func(context.Context, int, string, time.Time) (time.Time, error), func(context.Context) error, func(), error) {
	const topic = "dbserver1.public.articles"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), topic))
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		c.Close()
		return nil, nil, nil, nil, nil, err
	}
	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "bench"})
	if err != nil {
		prod.Close()
		c.Close()
		return nil, nil, nil, nil, nil, err
	}
	var mu sync.Mutex
	var lsn int64
	bodies, statuses := map[int]string{}, map[int]string{}
	send := func(ctx context.Context, id int, now time.Time) {
		lsn++
		after := map[string]any{"id": id, "body": bodies[id]}
		if st, ok := statuses[id]; ok {
			after["status"] = st
		}
		value, _ := json.Marshal(map[string]any{
			"op": "u",
			"source": map[string]any{"connector": "postgresql", "schema": "public", "table": "articles",
				"lsn": lsn, "txId": lsn, "ts_ms": now.UnixMilli()},
			"after": after,
		})
		prod.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, `{"id":%d}`, id), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				warnf("produce: %v", err)
			}
		})
	}
	produce := func(ctx context.Context, id int, body string, now time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		bodies[id] = body
		send(ctx, id, now)
		return nil
	}
	setStatus := func(ctx context.Context, id int, status string, now time.Time) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := bodies[id]; !ok {
			return now, fmt.Errorf("status of document %d before its text", id)
		}
		statuses[id] = status
		send(ctx, id, now)
		// Committed in the source at now: its ts_ms.
		return now, nil
	}
	return src, produce, setStatus, prod.Flush, func() { src.Close(); prod.Close(); c.Close() }, nil
}

// postgresLeg returns the Postgres source streaming a table, publication
// and slot of their own (see pgSource), their name, the functions that
// commit a change of text and of status, and a closer that stops the
// source and drops them.
func postgresLeg(ctx context.Context, o options) (pipeline.Source, string, func(context.Context, int, string, time.Time) error,
	func(context.Context, int, string, time.Time) (time.Time, error), func(), error) {
	name, write, setStatus, drop, err := pgSource(ctx, o)
	if err != nil {
		return nil, "", nil, nil, nil, err
	}
	src, err := pgrepl.New(ctx, pgrepl.Config{
		URL: o.url, Slot: name, Publication: name, Tables: []cdc.TableConfig{{Match: name + ".articles"}},
		ApplicationName: "bench-freshness", State: pgrepl.NewMemoryState(),
	})
	if err != nil {
		drop()
		return nil, "", nil, nil, nil, err
	}
	return src, name, write, setStatus, func() {
		// The slot can be dropped only once its walsender is gone.
		src.Close()
		drop()
	}, nil
}

// pgSource creates a source table (schema.articles), a publication and a
// logical replication slot of its own, all named bench_fresh_src_<random>,
// and returns that name, a function that commits a change of document id's
// body (one transaction: its commit timestamp is the change's), one that
// commits a change of its status alone (a column -metadata declares as a
// field; it returns when the commit returned), and a function that drops
// them all, to call once nothing streams from the slot.
func pgSource(ctx context.Context, o options) (string, func(context.Context, int, string, time.Time) error,
	func(context.Context, int, string, time.Time) (time.Time, error), func(), error) {
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	name := "bench_fresh_src_" + hex.EncodeToString(rb[:])
	conn, err := pgx.Connect(ctx, o.url)
	if err != nil {
		return "", nil, nil, nil, err
	}
	var undo []string
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, q := range slices.Backward(undo) {
			// The slot stays active for a moment after its consumer
			// closed the connection: retry until its walsender is gone.
			var err error
			for range 30 {
				if _, err = conn.Exec(dctx, q); err == nil {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil {
				warnf("clean up: %s: %v", q, err)
			}
		}
		conn.Close(dctx)
	}
	for _, q := range []struct{ do, undo string }{
		{"CREATE SCHEMA " + name, "DROP SCHEMA IF EXISTS " + name + " CASCADE"},
		{"CREATE TABLE " + name + ".articles (id int PRIMARY KEY, body text, status text)", ""},
		{"CREATE PUBLICATION " + name + " FOR TABLE " + name + ".articles", "DROP PUBLICATION IF EXISTS " + name},
		// Created before the first write, so the stream holds every change.
		{"SELECT pg_create_logical_replication_slot('" + name + "', 'pgoutput')",
			"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '" + name + "'"},
	} {
		if _, err := conn.Exec(ctx, q.do); err != nil {
			drop()
			return "", nil, nil, nil, fmt.Errorf("%s: %w", q.do, err)
		}
		if q.undo != "" {
			undo = append(undo, q.undo)
		}
	}
	upsert := "INSERT INTO " + name + ".articles (id, body) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = excluded.body"
	var mu sync.Mutex // one connection: text and status changes take turns
	write := func(ctx context.Context, id int, body string, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := conn.Exec(ctx, upsert, id, body)
		return err
	}
	update := "UPDATE " + name + ".articles SET status = $2 WHERE id = $1"
	setStatus := func(ctx context.Context, id int, status string, _ time.Time) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		tag, err := conn.Exec(ctx, update, id, status)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("status of document %d before its text", id)
		}
		return time.Now(), err
	}
	return name, write, setStatus, drop, nil
}
