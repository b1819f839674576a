// Command monitor measures what the monitor costs the write path (issue
// 14): it drains the same backlog of Debezium events through the pipeline
// into a fresh Postgres schema with the monitor off and on, alternating,
// and reports the median events/s of each, their ratio (the goal: on ≥ 95%
// of off), the peak Go heap, and the tokens the monitor spent. The monitor
// runs far hotter than its defaults (a check every -interval with a
// stored-vector sample of -sample chunks) so its cost shows.
//
//	go run ./bench/monitor [-events 6000] [-rounds 3] [-interval 1s] [-sample 64]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func main() {
	events := flag.Int("events", 6000, "events in the backlog")
	docs := flag.Int("docs", 1500, "distinct documents")
	rounds := flag.Int("rounds", 3, "runs of each mode, alternating")
	interval := flag.Duration("interval", time.Second, "monitor.interval while on (at least 1s)")
	sample := flag.Int("sample", 64, "monitor.sample_size while on")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	flag.Parse()
	if err := run(*events, *docs, *rounds, *interval, *sample, *pgURL); err != nil {
		fmt.Fprintln(os.Stderr, "bench monitor:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var words = strings.Fields("tide pool anemone crab sourdough starter flour water bicycle chain wear checker kubernetes pod node scheduler " +
	"refund invoice payment contract tenant landlord notice river flood rain library budget committee vote glucose light energy")

// backlog is the same sequence of creates and updates for every run.
func backlog(events, docs int) []cdc.Message {
	var out []cdc.Message
	for i := range events {
		id := i % docs
		var b strings.Builder
		for p := range 6 {
			fmt.Fprintf(&b, "## Part %d\n\n", p)
			for w := range 40 {
				b.WriteString(words[(id*7+p*13+w*(i/docs+1))%len(words)])
				b.WriteByte(' ')
			}
			b.WriteString("\n\n")
		}
		op := "c"
		if i >= docs {
			op = "u"
		}
		out = append(out, debeziumtest.Message("articles", op, id, int64(100+i), map[string]any{"body": b.String()}))
	}
	return out
}

type sliceSource struct{ batches [][]cdc.Message }

func (s *sliceSource) Fetch(context.Context) (cdc.Batch, error) {
	if len(s.batches) == 0 {
		return cdc.Batch{}, io.EOF
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return cdc.Batch{Messages: b, Ack: func(context.Context) error { return nil }}, nil
}

type result struct {
	rate   float64
	tokens float64
	checks float64
}

func run(events, docs, rounds int, interval time.Duration, sample int, pgURL string) error {
	msgs := backlog(events, docs)
	var off, on []float64
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	var tokens, checks float64
	for r := range rounds {
		for _, withMonitor := range []bool{r%2 == 1, r%2 == 0} {
			res, err := once(msgs, withMonitor, interval, sample, pgURL)
			if err != nil {
				return err
			}
			if withMonitor {
				on = append(on, res.rate)
				tokens += res.tokens
				checks += res.checks
			} else {
				off = append(off, res.rate)
			}
			fmt.Printf("round %d monitor=%-5v %8.0f events/s  (monitor checks %.0f, tokens %.0f)\n", r+1, withMonitor, res.rate, res.checks, res.tokens)
		}
	}
	close(stop)
	<-done
	mOff, mOn := median(off), median(on)
	ratio := mOn / mOff
	fmt.Printf("\nmedian events/s: monitor off %.0f, on %.0f: ratio %.3f (goal >= 0.95)\n", mOff, mOn, ratio)
	fmt.Printf("monitor: %.0f checks, %.0f tokens re-embedded over %d runs (%.0f tokens a check)\n", checks, tokens, rounds, tokens/max(checks, 1))
	fmt.Printf("peak Go heap in use: %.1f MiB\n", float64(peak.Load())/(1<<20))
	if ratio < 0.95 {
		return fmt.Errorf("throughput with the monitor on is %.1f%% of off, below 95%%", 100*ratio)
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func once(msgs []cdc.Message, withMonitor bool, interval time.Duration, sample int, pgURL string) (result, error) {
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bench_mon_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, pgURL, schema)
	if err != nil {
		return result{}, err
	}
	defer func() {
		pool.Close()
		if conn, err := pgx.Connect(ctx, pgURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(ctx)
		}
	}()
	if err := migrations.Up(ctx, pool, schema, nil); err != nil {
		return result{}, err
	}
	emb := embedder.NewHashing(384)
	st, err := sink.New(ctx, pool, sink.Config{Schema: schema, Index: "bench", Model: emb.Model(), Dimensions: emb.Dimensions()})
	if err != nil {
		return result{}, err
	}
	ch, err := chunker.New(chunker.Config{})
	if err != nil {
		return result{}, err
	}
	src := &sliceSource{}
	for start := 0; start < len(msgs); start += 500 {
		src.batches = append(src.batches, msgs[start:min(start+500, len(msgs))])
	}
	p, err := pipeline.New(pipeline.Config{Workers: 4}, pipeline.Stages{
		Source: src, Decoder: cdc.NewDecoder(cdc.DecoderConfig{}), Splitter: ch, Embedder: emb, Sink: st,
	})
	if err != nil {
		return result{}, err
	}
	reg := prometheus.NewRegistry()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	monDone := make(chan error, 1)
	if withMonitor {
		m, err := monitor.New(ctx, monitor.Config{Interval: interval, SampleSize: sample, ReferenceSize: 500, WindowSize: 500,
			Registerer: reg, Logger: slog.New(slog.DiscardHandler)},
			monitor.Deps{Pool: pool, Schema: schema, Index: "bench", Embedder: emb, Gatherer: reg,
				Publishers: []monitor.Publisher{monitor.LogPublisher{Logger: slog.New(slog.DiscardHandler)}}})
		if err != nil {
			return result{}, err
		}
		go func() { monDone <- m.Run(runCtx) }()
	} else {
		monDone <- nil
	}
	start := time.Now()
	err = p.Run(ctx)
	elapsed := time.Since(start)
	cancel()
	if merr := <-monDone; merr != nil {
		err = errors.Join(err, merr)
	}
	if err != nil {
		return result{}, err
	}
	var res result
	res.rate = float64(len(msgs)) / elapsed.Seconds()
	if withMonitor {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "ragsync_monitor_tokens_total":
					res.tokens += m.GetCounter().GetValue()
				case "ragsync_monitor_checks_total":
					res.checks += m.GetCounter().GetValue()
				}
			}
		}
	}
	return res, nil
}
