// Command bulk measures the bulk path: the same load of chunks into
// an empty index, once through the streaming path (Store.Upsert with the
// HNSW index maintained row by row) and once through sink.Bulk (COPY, then
// one HNSW build), in one run, and prints both rates and their ratio.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

func main() {
	chunks := flag.Int("chunks", 100_000, "chunks in the load")
	perDoc := flag.Int("per-doc", 10, "chunks per document")
	dims := flag.Int("dims", 384, "vector dimensions")
	workers := flag.Int("workers", 4, "concurrent writers on the streaming path (pipeline.workers' default)")
	flushDocs := flag.Int("flush-docs", 500, "documents per bulk flush (backfill.page_rows' default)")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	flag.Parse()
	if err := run(*pgURL, *chunks, *perDoc, *dims, *workers, *flushDocs); err != nil {
		fmt.Fprintln(os.Stderr, "bench-bulk:", err)
		os.Exit(1)
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func run(url string, nChunks, perDoc, dims, workers, flushDocs int) error {
	ctx := context.Background()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "bench_bulk_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, url, schema)
	if err != nil {
		return err
	}
	defer func() {
		pool.Close()
		if conn, err := pgx.Connect(context.Background(), url); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(context.Background())
		}
	}()
	if err := migrations.Up(ctx, pool, schema, slog.New(slog.DiscardHandler)); err != nil {
		return err
	}
	docs := makeDocs(nChunks/perDoc, perDoc, dims)
	fmt.Printf("bench-bulk: %d chunks in %d documents, %d dimensions, schema %s\n", len(docs)*perDoc, len(docs), dims, schema)

	// Different models, so each path fills its own embedding cache rows.
	stream, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "streaming", Model: "bench-stream", Dimensions: dims})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := streamLoad(ctx, stream, docs, workers); err != nil {
		return err
	}
	streamSecs := time.Since(start).Seconds()

	start = time.Now()
	bulk, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Bulk, Create: true, Schema: schema, Index: "bulk", Model: "bench-bulk", Dimensions: dims})
	if err != nil {
		return err
	}
	if bulk.Mode() != sink.Bulk {
		return fmt.Errorf("index bulk of schema %s holds documents: nothing to bulk-load", schema)
	}
	for i, d := range docs {
		if _, err := bulk.Upsert(ctx, d); err != nil {
			return err
		}
		if (i+1)%flushDocs == 0 {
			if err := bulk.Flush(ctx); err != nil {
				return err
			}
		}
	}
	if err := bulk.Flush(ctx); err != nil {
		return err
	}
	loadSecs := time.Since(start).Seconds()
	if err := bulk.Finish(ctx, sink.BuildOptions{}); err != nil {
		return err
	}
	bulkSecs := time.Since(start).Seconds()

	n := float64(len(docs) * perDoc)
	fmt.Printf("streaming (Upsert, %d writers, live HNSW): %8.1f s  %9.0f chunks/s\n", workers, streamSecs, n/streamSecs)
	fmt.Printf("bulk (COPY %.1f s + HNSW build %.1f s):    %8.1f s  %9.0f chunks/s\n", loadSecs, bulkSecs-loadSecs, bulkSecs, n/bulkSecs)
	fmt.Printf("bulk / streaming rate: %.2fx (target >= 3x)\n", streamSecs/bulkSecs)
	return nil
}

func streamLoad(ctx context.Context, st *sink.Store, docs []sink.Document, workers int) error {
	next := make(chan sink.Document)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range next {
				if _, err := st.Upsert(ctx, d); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, d := range docs {
		select {
		case next <- d:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

// makeDocs builds documents of distinct chunks with random unit vectors.
func makeDocs(n, perDoc, dims int) []sink.Document {
	rng := mrand.New(mrand.NewPCG(12, 12))
	docs := make([]sink.Document, n)
	for i := range docs {
		cs := make([]sink.Chunk, perDoc)
		for j := range cs {
			v := make([]float32, dims)
			var norm float64
			for k := range v {
				v[k] = float32(rng.NormFloat64())
				norm += float64(v[k] * v[k])
			}
			for k := range v {
				v[k] /= float32(math.Sqrt(norm))
			}
			cs[j] = sink.Chunk{Position: j, Hash: fmt.Sprintf("%064x", i*perDoc+j), Text: fmt.Sprintf("chunk %d of document %d", j, i), Tokens: 6, Vector: v}
		}
		docs[i] = sink.Document{Table: "public.bench", Key: fmt.Sprint(i), Version: cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(i + 1)}},
			Row: map[string]any{"id": i}, Chunks: cs}
	}
	return docs
}
