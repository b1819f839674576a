package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// indexName is every run's index (each run has a schema of its own).
const indexName = "sizing"

// model is the name the runs register: the vectors are projected hashing
// vectors, not a model's.
const model = "sizing-projected-hashing"

// vectors are one dimension's projected vectors of a corpus, with the
// exact k-th nearest similarity of each query among the build vectors.
type vectors struct {
	dims                   int
	queries, build, insert [][]float32
	kth                    []float64
	// The texts of build and insert, stored on the rows (their size is
	// part of the table's).
	buildTexts, insertTexts []text
}

// sizes are a run's bytes right after the bulk build, VACUUM ANALYZE'd.
type sizes struct {
	chunks                int64   // rows of the chunks table
	heap, toast           int64   // chunks' heap (with FSM and VM) and TOAST (with its index)
	hnsw                  int64   // pg_relation_size(chunks_hnsw_<index>)
	otherChunkIdx         int64   // chunks' other indexes
	documents, cache      int64   // documents and embedding_cache, with their indexes and TOAST
	textBytes, vectorCols float64 // mean octet_length of chunks.text and of the stored vector column(s)
}

// queryStats are one query pass: Q searches with k = 10, one at a time.
type queryStats struct {
	candidates, efSearch int  // as the store reports them (candidates 0: not a bit index)
	defaulted            bool // candidates is the sink's default for k
	indexed              int  // searches that scanned the HNSW index (the others were exact scans)
	n                    int  // searches timed
	p50, p99             time.Duration
	recall               float64
}

// result is one (type, dimensions) run.
type result struct {
	typ                 sink.VectorType
	n, dims             int
	hnsw                sink.HNSW
	size                sizes
	copySecs, buildSecs float64 // COPY of the rows; the whole bulk build (COPY + HNSW build)
	inserted            int
	insertRate          float64 // chunks/s through Write-mode Upserts after the build
	queries             []queryStats
}

// runOpts are the settings every run shares.
type runOpts struct {
	url                string
	perDoc             int
	flushDocs          int
	workers            int
	hnsw               sink.HNSW
	candidates         []int // bit only; 0 = the default
	maintenanceWorkMem string
	fullText           bool
	warmup             bool
	k                  int
	logger             *slog.Logger
	keepSchema         bool
}

// runOne loads vs into a fresh schema as an index of type t, measures it
// and drops the schema.
func runOne(ctx context.Context, o runOpts, t sink.VectorType, vs *vectors) (res result, err error) {
	res = result{typ: t, n: len(vs.build), dims: vs.dims}
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "bench_sizing_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, o.url, schema)
	if err != nil {
		return res, err
	}
	defer func() {
		pool.Close()
		if o.keepSchema {
			fmt.Printf("  schema %s kept (-keep)\n", schema)
			return
		}
		// The run's context may be cancelled: drop with a fresh one.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if conn, cerr := pgx.Connect(dctx, o.url); cerr == nil {
			if _, derr := conn.Exec(dctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); derr != nil && err == nil {
				err = fmt.Errorf("drop schema %s: %w (drop it by hand)", schema, derr)
			}
			conn.Close(dctx)
		} else if err == nil {
			err = fmt.Errorf("drop schema %s: %w (drop it by hand)", schema, cerr)
		}
	}()
	if err := migrations.Up(ctx, pool, schema, o.logger); err != nil {
		return res, err
	}
	fmt.Printf("  %s, %d dims: schema %s\n", t, vs.dims, schema)

	cfg := sink.Config{Mode: sink.Bulk, Create: true, Schema: schema, Index: indexName, Model: model, Dimensions: vs.dims,
		Type: t, HNSW: o.hnsw, SkipFullText: !o.fullText, Logger: o.logger}
	cands := []int{0}
	if t == sink.TypeBit && len(o.candidates) > 0 {
		cands = o.candidates
		cfg.Candidates = cands[0]
	}

	// The bulk build: COPY the rows, then one HNSW build.
	buildDocs := makeDocs(vs.buildTexts, vs.build, o.perDoc, 0)
	start := time.Now()
	st, err := sink.OpenIndex(ctx, pool, cfg)
	if err != nil {
		return res, err
	}
	if st.Mode() != sink.Bulk {
		return res, fmt.Errorf("index %s of schema %s opened in %s mode: a new schema's index should bulk-load", indexName, schema, st.Mode())
	}
	for i, d := range buildDocs {
		if _, err := st.Upsert(ctx, d); err != nil {
			return res, err
		}
		if (i+1)%o.flushDocs == 0 {
			if err := st.Flush(ctx); err != nil {
				return res, err
			}
		}
	}
	if err := st.Flush(ctx); err != nil {
		return res, err
	}
	res.copySecs = time.Since(start).Seconds()
	if err := st.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: o.maintenanceWorkMem}); err != nil {
		return res, err
	}
	res.buildSecs = time.Since(start).Seconds()
	res.hnsw = st.Identity().HNSW

	if res.size, err = measureSizes(ctx, pool, schema); err != nil {
		return res, err
	}
	if res.size.chunks != int64(len(vs.build)) {
		return res, fmt.Errorf("the index holds %d chunks after the build, want %d", res.size.chunks, len(vs.build))
	}

	// Queries over the N built chunks, once per candidates value (bit).
	for i, c := range cands {
		qs := st
		if i > 0 {
			// The candidate count is a query-time setting a writer records:
			// reopen with the next one.
			wcfg := cfg
			wcfg.Mode, wcfg.Create, wcfg.Candidates = sink.Write, false, c
			if qs, err = sink.OpenIndex(ctx, pool, wcfg); err != nil {
				return res, err
			}
		}
		q, err := runQueries(ctx, pool, schema, qs, vs, o)
		if err != nil {
			return res, err
		}
		res.queries = append(res.queries, q)
	}

	// Online inserts after the build: Write-mode Upserts from o.workers
	// writers (the sink groups concurrent ones into shared transactions).
	wcfg := cfg
	wcfg.Mode, wcfg.Create = sink.Write, false
	ws, err := sink.OpenIndex(ctx, pool, wcfg)
	if err != nil {
		return res, err
	}
	insDocs := makeDocs(vs.insertTexts, vs.insert, o.perDoc, len(buildDocs))
	start = time.Now()
	if err := streamLoad(ctx, ws, insDocs, o.workers); err != nil {
		return res, err
	}
	secs := time.Since(start).Seconds()
	res.inserted = len(vs.insert)
	res.insertRate = float64(len(vs.insert)) / secs
	var total int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".chunks").Scan(&total); err != nil {
		return res, err
	}
	if want := int64(len(vs.build) + len(vs.insert)); total != want {
		return res, fmt.Errorf("the index holds %d chunks after the inserts, want %d", total, want)
	}
	return res, nil
}

// measureSizes reads the run's relation sizes after VACUUM ANALYZE (so
// every run has its visibility and free-space maps, and the planner the
// row counts: without statistics on documents, right after a bulk load,
// it joins from documents and sorts every chunk instead of using the HNSW
// index, until autovacuum analyzes).
func measureSizes(ctx context.Context, pool *pgxpool.Pool, schema string) (sizes, error) {
	var s sizes
	chunks := schema + ".chunks"
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+chunks+", "+schema+".documents"); err != nil {
		return s, fmt.Errorf("vacuum %s: %w", chunks, err)
	}
	err := pool.QueryRow(ctx, `SELECT
		pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		pg_relation_size(to_regclass($2)),
		pg_indexes_size(c.oid) - pg_relation_size(to_regclass($2)),
		pg_total_relation_size(to_regclass($3)),
		pg_total_relation_size(to_regclass($4))
		FROM pg_class c WHERE c.oid = to_regclass($1)`,
		chunks, schema+".chunks_hnsw_"+indexName, schema+".documents", schema+".embedding_cache").
		Scan(&s.heap, &s.toast, &s.hnsw, &s.otherChunkIdx, &s.documents, &s.cache)
	if err != nil {
		return s, fmt.Errorf("read sizes: %w", err)
	}
	// The vector columns: embedding for vector and bit, embedding_half for
	// halfvec (where the schema has it).
	cols := "coalesce(pg_column_size(embedding), 0)"
	var hasHalf bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'chunks' AND column_name = 'embedding_half')", schema).Scan(&hasHalf); err != nil {
		return s, err
	}
	if hasHalf {
		cols += " + coalesce(pg_column_size(embedding_half), 0)"
	}
	err = pool.QueryRow(ctx, "SELECT count(*), coalesce(avg(octet_length(text)), 0), coalesce(avg("+cols+"), 0) FROM "+chunks).
		Scan(&s.chunks, &s.textBytes, &s.vectorCols)
	if err != nil {
		return s, fmt.Errorf("read sizes: %w", err)
	}
	return s, nil
}

// runQueries searches every query vector (k = o.k) through st, one at a
// time, after an untimed warm-up pass, and scores the hits against the
// exact nearest.
func runQueries(ctx context.Context, pool *pgxpool.Pool, schema string, st *sink.Store, vs *vectors, o runOpts) (queryStats, error) {
	id := st.Identity()
	qs := queryStats{efSearch: id.HNSW.EfSearch, n: len(vs.queries)}
	if id.Type == sink.TypeBit {
		qs.candidates = id.Candidates
		if qs.candidates == 0 {
			qs.candidates, qs.defaulted = sink.DefaultCandidates(o.k), true
		}
	}
	if o.warmup {
		for _, q := range vs.queries {
			if _, err := st.Search(ctx, q, sink.Query{K: o.k}); err != nil {
				return qs, err
			}
		}
	}
	scans0, err := hnswScans(ctx, pool, schema)
	if err != nil {
		return qs, err
	}
	lat := make([]time.Duration, len(vs.queries))
	var recall float64
	for i, q := range vs.queries {
		start := time.Now()
		hits, err := st.Search(ctx, q, sink.Query{K: o.k})
		lat[i] = time.Since(start)
		if err != nil {
			return qs, err
		}
		got := make([][]float32, 0, len(hits))
		for _, h := range hits {
			d, err := strconv.Atoi(h.Key)
			if err != nil || h.Position < 0 || h.Position >= o.perDoc || d*o.perDoc+h.Position >= len(vs.build) {
				return qs, fmt.Errorf("search returned chunk %q/%d, which the build did not load", h.Key, h.Position)
			}
			got = append(got, vs.build[d*o.perDoc+h.Position])
		}
		recall += recallAt(q, got, vs.kth[i], o.k)
	}
	// A search the planner runs without the HNSW index (an exact scan, its
	// choice on small indexes) has recall 1 and a sequential scan's
	// latency: count them, so the report can say so. Backends flush their
	// statistics within about a second of going idle.
	for deadline := time.Now().Add(3 * time.Second); ; {
		scans, err := hnswScans(ctx, pool, schema)
		if err != nil {
			return qs, err
		}
		qs.indexed = int(min(scans-scans0, int64(len(vs.queries))))
		if qs.indexed == len(vs.queries) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	qs.p50, qs.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
	qs.recall = recall / float64(len(vs.queries))
	return qs, nil
}

// makeDocs groups texts and their vectors into documents of perDoc
// chunks; document keys count from firstDoc, so chunk i is document
// firstDoc + i/perDoc, position i%perDoc.
func makeDocs(texts []text, vecs [][]float32, perDoc, firstDoc int) []sink.Document {
	var docs []sink.Document
	for start := 0; start < len(vecs); start += perDoc {
		d := firstDoc + start/perDoc
		end := min(start+perDoc, len(vecs))
		cs := make([]sink.Chunk, 0, end-start)
		for i := start; i < end; i++ {
			// Tokens is not measured: about 4 bytes a token.
			cs = append(cs, sink.Chunk{Position: i - start, Hash: texts[i].hash, Text: texts[i].body, Tokens: max(1, len(texts[i].body)/4), Vector: vecs[i]})
		}
		docs = append(docs, sink.Document{Table: "public.sizing", Key: strconv.Itoa(d),
			Version: cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(d + 1)}},
			Row:     map[string]any{"id": d}, Chunks: cs})
	}
	return docs
}

// streamLoad upserts docs from workers goroutines.
func streamLoad(ctx context.Context, st *sink.Store, docs []sink.Document, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan sink.Document)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range next {
				if _, err := st.Upsert(ctx, d); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
feed:
	for _, d := range docs {
		select {
		case next <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// hnswScans is how many index scans the run's HNSW index has had.
func hnswScans(ctx context.Context, pool *pgxpool.Pool, schema string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_all_indexes WHERE schemaname = $1 AND indexrelname = $2",
		schema, "chunks_hnsw_"+indexName).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the HNSW index's scans: %w", err)
	}
	return n, nil
}
