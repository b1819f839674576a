// Command shadow measures the cost of blue/green dual-writing:
// the same changes applied by the pipeline to one index, and to that index
// plus a shadow of another model (pipeline.Shadow, as serve does while
// `ragsync reindex` builds a new index), in one run, alternating, with the
// offline hashing embedder so the figure is the write path's own. It prints
// both rates and the ratio.
//
//	go run ./bench/shadow [-docs 2000] [-rounds 3]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func main() {
	docs := flag.Int("docs", 2000, "documents per load (each created, then updated once)")
	rounds := flag.Int("rounds", 3, "alternating rounds of each configuration")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	flag.Parse()
	if err := run(*pgURL, *docs, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-shadow:", err)
		os.Exit(1)
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

var words = strings.Fields(`tide pool anemone crab kayak paddle espresso grind glacier moraine crevasse
	bicycle chain sourdough starter flour water forecast wind headland current river valley ice rock`)

func changes(n int) []cdc.Record {
	var msgs []cdc.Record
	para := func(id, rev, k int) string {
		var b strings.Builder
		for i := range 60 {
			b.WriteString(words[(id*7+rev*13+k*3+i*i)%len(words)])
			b.WriteByte(' ')
		}
		return b.String()
	}
	for rev := range 2 {
		for id := 1; id <= n; id++ {
			op := "c"
			if rev > 0 {
				op = "u"
			}
			body := para(id, rev, 0) + "\n\n" + para(id, 0, 1) + "\n\n" + para(id, rev, 2)
			msgs = append(msgs, debeziumtest.Message("docs", op, id, int64(rev*n+id), map[string]any{"body": body}))
		}
	}
	return msgs
}

// source hands over its batches decoded as it goes, as a file source does.
type source struct {
	batches [][]cdc.Record
	dec     *cdc.Decoder
}

func (s *source) Fetch(context.Context) (cdc.Batch, error) {
	if len(s.batches) == 0 {
		return cdc.Batch{}, io.EOF
	}
	b := slices.Clone(s.batches[0])
	s.batches = s.batches[1:]
	return cdc.Batch{Records: cdc.DecodeAll(s.dec, b)}, nil
}

// load applies msgs in a fresh schema, with a shadow or not; it returns the
// seconds taken.
func load(ctx context.Context, url string, msgs []cdc.Record, shadow bool) (float64, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "bench_shadow_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, url, schema)
	if err != nil {
		return 0, err
	}
	defer drop(pool, url, schema)
	if err := migrations.Up(ctx, pool, schema, slog.New(slog.DiscardHandler)); err != nil {
		return 0, err
	}
	primary, err := sink.New(ctx, pool, sink.Config{Schema: schema, Index: "docs", Model: embedder.HashingModel, Dimensions: 384})
	if err != nil {
		return 0, err
	}
	ch, err := chunker.New(chunker.Config{TargetTokens: 64, MinTokens: 16, MaxTokens: 256})
	if err != nil {
		return 0, err
	}
	var batches [][]cdc.Record
	for lo := 0; lo < len(msgs); lo += 500 {
		batches = append(batches, msgs[lo:min(lo+500, len(msgs))])
	}
	p, err := pipeline.New(pipeline.Config{Workers: 4}, pipeline.Stages{
		Source: &source{batches: slices.Clone(batches), dec: cdc.NewDecoder(cdc.DecoderConfig{})}, Splitter: ch,
		Target: pipeline.Target{Name: "docs", Index: primary, Embedder: embedder.NewHashing(384)},
	})
	if err != nil {
		return 0, err
	}
	if shadow {
		st, err := sink.New(ctx, pool, sink.Config{Schema: schema, Index: "docs_v2", Model: embedder.HashingModel, Dimensions: 256})
		if err != nil {
			return 0, err
		}
		if err := p.SetShadows([]pipeline.Target{{Name: "docs_v2", Index: st, Embedder: embedder.NewHashing(256)}}); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if err := p.Run(ctx); err != nil {
		return 0, err
	}
	secs := time.Since(start).Seconds()
	if st := p.Stats(); st["applied"] != len(msgs) || st["shadow_failed"] != 0 {
		return 0, fmt.Errorf("load incomplete: %s", st)
	}
	return secs, nil
}

func drop(pool *pgxpool.Pool, url, schema string) {
	pool.Close()
	if conn, err := pgx.Connect(context.Background(), url); err == nil {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Close(context.Background())
	}
}

func run(url string, docs, rounds int) error {
	ctx := context.Background()
	msgs := changes(docs)
	fmt.Printf("bench-shadow: %d changes (%d documents created, then updated), 4 workers, hashing embedder\n", len(msgs), docs)
	var alone, dual []float64
	for r := range rounds {
		a, err := load(ctx, url, msgs, false)
		if err != nil {
			return err
		}
		d, err := load(ctx, url, msgs, true)
		if err != nil {
			return err
		}
		alone, dual = append(alone, a), append(dual, d)
		fmt.Printf("round %d: one index %.2f s, with a shadow %.2f s\n", r+1, a, d)
	}
	ma, md := median(alone), median(dual)
	n := float64(len(msgs))
	fmt.Printf("one index:        median %.2f s  %7.0f changes/s\n", ma, n/ma)
	fmt.Printf("index + shadow:   median %.2f s  %7.0f changes/s\n", md, n/md)
	fmt.Printf("dual-write / one-index time: %.2fx\n", md/ma)
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
