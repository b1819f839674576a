// Command sizing measures what each vector type costs and gives: for each
// type (vector, halfvec, bit with re-rank) at N chunks and each dimension
// D, in a schema of its own (dropped at the end), it
//
//   - bulk-loads N chunks through sink.OpenIndex in Bulk mode (COPY, then
//     one HNSW build) and times it;
//   - reads the bytes per chunk of the chunks table (heap + TOAST; the
//     schema holds only this run, so the whole table is the index's) and of
//     the HNSW index (pg_relation_size of chunks_hnsw_<index>);
//   - searches Q held-out queries (texts not in the index) through
//     Store.Search with k = 10, one at a time after a warm-up pass: p50 and
//     p99 latency, and recall@10 against the exact nearest (brute force in
//     Go over the same full-precision vectors);
//   - then upserts N/10 more chunks through a Write-mode store from
//     -workers writers: the online insert rate.
//
// The types of one dimension are built first and kept; their query passes
// and their shares of the inserts then alternate over -rounds rounds, so a
// busy machine slows every type alike and the ratios to vector hold.
//
// The vectors are dense like a model's but are not one: each text's
// hashing-embedder vector (a sparse bag of hashed words) times a fixed
// seeded Gaussian matrix, normalised, which keeps cosines close to the
// hashing vectors'. Recall with this projection compares the index types on
// the same vectors; it is not a real model's recall.
//
//	go run ./bench/sizing [-n 100000] [-dims 768,1536] [-types vector,halfvec,bit] [-queries 200] [-candidates 0,400] [-ef-search 40]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ragsync/ragsync/sink"
)

func main() {
	var (
		o        runOpts
		n        int
		nQueries int
		dimsFlag string
		types    string
		cands    string
		dataDir  string
		target   int
		baseDims int
		seed     uint64
		insFrac  float64
	)
	flag.IntVar(&n, "n", 100_000, "chunks in each index's bulk build")
	flag.StringVar(&dimsFlag, "dims", "768,1536", "vector dimensions, comma-separated")
	flag.StringVar(&types, "types", "vector,halfvec,bit", "index types, comma-separated (vector, halfvec, bit)")
	flag.IntVar(&nQueries, "queries", 200, "held-out query texts, each searched with k=10")
	flag.StringVar(&cands, "candidates", "", "bit only: re-rank candidate counts to query with, comma-separated, 0 = the sink's default (empty: the default only); the first is recorded at creation, the others by reopening the index")
	flag.IntVar(&o.hnsw.EfSearch, "ef-search", 0, "hnsw.ef_search recorded for the index (0: the sink's default)")
	flag.IntVar(&o.hnsw.M, "m", 0, "HNSW m (0: the sink's default)")
	flag.IntVar(&o.hnsw.EfConstruction, "ef-construction", 0, "HNSW ef_construction (0: the sink's default)")
	flag.Float64Var(&insFrac, "insert-frac", 0.1, "chunks upserted online after the build, as a share of -n")
	flag.IntVar(&o.perDoc, "per-doc", 10, "chunks per document")
	flag.IntVar(&o.flushDocs, "flush-docs", 500, "documents per bulk flush (backfill.page_rows' default)")
	flag.IntVar(&o.workers, "workers", 4, "concurrent writers of the online inserts (pipeline.workers' default)")
	flag.StringVar(&o.maintenanceWorkMem, "maintenance-work-mem", "", "maintenance_work_mem of the HNSW build (empty: the sink's default, 512MB)")
	flag.BoolVar(&o.fullText, "full-text", false, "write the chunks' tsvector column (postgres.full_text; off without a front door)")
	flag.BoolVar(&o.warmup, "warmup", true, "search every query once, untimed, before the timed pass")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of query passes and of online inserts, alternating the types (p50 and p99 are the medians of the rounds' passes; the inserts are split over the rounds)")
	flag.BoolVar(&o.keepSchema, "keep", false, "keep each run's schema (to inspect it; drop it by hand)")
	flag.StringVar(&dataDir, "data", "", "directory holding edits-A/ and edits-C/ (default ../shared/data beside the repository); synthetic text when absent")
	flag.IntVar(&target, "target-tokens", 128, "chunker target_tokens for cutting the data sets' documents into chunks")
	flag.IntVar(&baseDims, "base-dims", 4096, "dimensions of the hashing vectors the projection starts from")
	flag.Uint64Var(&seed, "seed", 7, "seed of the shuffle and of the projection")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL; schemas bench_sizing_* are created and dropped there")
	flag.Parse()
	o.url, o.k = *pgURL, 10
	o.logger = slog.New(slog.DiscardHandler)

	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "bench-sizing:", err)
		os.Exit(1)
	}
	dims, err := intList(dimsFlag)
	if err != nil {
		fail(fmt.Errorf("-dims: %w", err))
	}
	if o.candidates, err = intList(cands); err != nil {
		fail(fmt.Errorf("-candidates: %w", err))
	}
	for i, c := range o.candidates {
		if c == 0 && i > 0 {
			// Reopening with 0 keeps the recorded count: the default can
			// only be queried before another count is recorded.
			fail(errors.New("-candidates: 0 (the default) can only come first, e.g. -candidates 0,400,800"))
		}
	}
	var vts []sink.VectorType
	for _, s := range strings.Split(types, ",") {
		t, err := sink.ParseVectorType(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("-types: %w", err))
		}
		vts = append(vts, t)
	}
	if n < 1 || nQueries < 1 || o.perDoc < 1 || o.flushDocs < 1 || insFrac < 0 {
		fail(errors.New("-n, -queries, -per-doc and -flush-docs must be at least 1, -insert-frac at least 0"))
	}
	if dataDir == "" {
		root, err := repoRoot()
		if err != nil {
			fail(err)
		}
		dataDir = filepath.Join(root, "..", "shared", "data")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, n, int(float64(n)*insFrac), nQueries, dims, vts, dataDir, target, baseDims, seed); err != nil {
		fail(err)
	}
}

func run(ctx context.Context, o runOpts, n, nInsert, nQueries int, dims []int, vts []sink.VectorType, dataDir string, target, baseDims int, seed uint64) error {
	workers := runtime.GOMAXPROCS(0)
	start := time.Now()
	c, err := loadCorpus(dataDir, target, nQueries, n, nInsert, seed)
	if err != nil {
		return err
	}
	all := append(append(append([]text{}, c.queries...), c.build...), c.insert...)
	hv, err := hashVectors(ctx, all, baseDims)
	if err != nil {
		return err
	}
	fmt.Printf("sizing: texts: %s (%.1f s to read, chunk and hash)\n", c.source, time.Since(start).Seconds())
	fmt.Printf("sizing: vectors: each text's hashing vector (%d dims) times a fixed Gaussian matrix (seed %d), normalised: dense like a model's, cosines close to the hashing vectors'. Recall with this projection compares index types on the same vectors, not a real model's recall.\n", baseDims, seed)
	fmt.Printf("sizing: %d chunks built, %d queries (held-out texts), %d chunks inserted online after, k=%d\n\n", n, nQueries, nInsert, o.k)

	var results []result
	for _, d := range dims {
		var run []sink.VectorType
		for _, t := range vts {
			if d > sink.MaxDimensionsFor(t) {
				fmt.Printf("sizing: %s at %d dims skipped: the type allows up to %d\n", t, d, sink.MaxDimensionsFor(t))
				continue
			}
			run = append(run, t)
		}
		if len(run) == 0 {
			continue
		}
		start := time.Now()
		p := newProjection(baseDims, d, seed)
		vecs := p.applyAll(hv, workers)
		vs := &vectors{dims: d, queries: vecs[:nQueries], build: vecs[nQueries : nQueries+n], insert: vecs[nQueries+n:],
			buildTexts: c.build, insertTexts: c.insert}
		vs.kth = exactKth(vs.queries, vs.build, o.k, workers)
		fmt.Printf("sizing: %d dims: projected and searched exactly in %.1f s\n", d, time.Since(start).Seconds())
		rs, err := runDims(ctx, o, run, vs)
		if err != nil {
			return err
		}
		for _, r := range rs {
			printDetail(r)
		}
		results = append(results, rs...)
		fmt.Println()
	}
	printTable(os.Stdout, results)
	printTargets(os.Stdout, results)
	return nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q: want non-negative integers, comma-separated", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// repoRoot is the directory holding go.mod, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from the repository, or pass -data")
		}
		dir = parent
	}
}
