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
	rounds               int  // passes summarised (p50 and p99 are their medians)
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
	rounds             int
}

// live is one type's index at one dimension while the runs of that
// dimension go on: built, its sizes read, queried and inserted into in
// rounds that alternate with the other types' (so a busy machine slows
// every type alike), then dropped.
type live struct {
	res    result
	schema string
	pool   *pgxpool.Pool
	// queryStores are one store per candidate count (bit; else one): a
	// store keeps the count it was opened with.
	queryStores []*sink.Store
	writer      *sink.Store
	// Per candidate count and round: the timed pass.
	passes   [][]queryStats
	insSecs  float64
	inserted int
}

// build loads vs into a fresh schema as an index of type t (sink.Bulk:
// COPY, then one HNSW build), reads its sizes and opens the stores the
// rounds use. The caller drops the schema with drop, also on error.
func build(ctx context.Context, o runOpts, t sink.VectorType, vs *vectors) (*live, error) {
	l := &live{res: result{typ: t, n: len(vs.build), dims: vs.dims}}
	var b [5]byte
	_, _ = rand.Read(b[:])
	l.schema = "bench_sizing_" + hex.EncodeToString(b[:])
	pool, err := sink.OpenPool(ctx, o.url, l.schema)
	if err != nil {
		return l, err
	}
	l.pool = pool
	if err := migrations.Up(ctx, pool, l.schema, o.logger); err != nil {
		return l, err
	}
	fmt.Printf("  %s, %d dims: schema %s\n", t, vs.dims, l.schema)

	cfg := sink.Config{Mode: sink.Bulk, Create: true, Schema: l.schema, Index: indexName, Model: model, Dimensions: vs.dims,
		Type: t, HNSW: o.hnsw, SkipFullText: !o.fullText, Logger: o.logger}
	cands := []int{0}
	if t == sink.TypeBit && len(o.candidates) > 0 {
		cands = o.candidates
		cfg.Candidates = cands[0]
	}

	buildDocs := makeDocs(vs.buildTexts, vs.build, o.perDoc, 0)
	start := time.Now()
	st, err := sink.OpenIndex(ctx, pool, cfg)
	if err != nil {
		return l, err
	}
	if st.Mode() != sink.Bulk {
		return l, fmt.Errorf("index %s of schema %s opened in %s mode: a new schema's index should bulk-load", indexName, l.schema, st.Mode())
	}
	for i, d := range buildDocs {
		if _, err := st.Upsert(ctx, d); err != nil {
			return l, err
		}
		if (i+1)%o.flushDocs == 0 {
			if err := st.Flush(ctx); err != nil {
				return l, err
			}
		}
	}
	if err := st.Flush(ctx); err != nil {
		return l, err
	}
	l.res.copySecs = time.Since(start).Seconds()
	if err := st.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: o.maintenanceWorkMem}); err != nil {
		return l, err
	}
	l.res.buildSecs = time.Since(start).Seconds()
	l.res.hnsw = st.Identity().HNSW

	if l.res.size, err = measureSizes(ctx, pool, l.schema); err != nil {
		return l, err
	}
	if l.res.size.chunks != int64(len(vs.build)) {
		return l, fmt.Errorf("the index holds %d chunks after the build, want %d", l.res.size.chunks, len(vs.build))
	}

	// One store per candidate count: the count is a query-time setting a
	// writer records, and a store keeps the one it opened with. The
	// default (0) comes first, before any count is recorded.
	l.queryStores = []*sink.Store{st}
	for _, c := range cands[1:] {
		wcfg := cfg
		wcfg.Mode, wcfg.Create, wcfg.Candidates = sink.Write, false, c
		qs, err := sink.OpenIndex(ctx, pool, wcfg)
		if err != nil {
			return l, err
		}
		l.queryStores = append(l.queryStores, qs)
	}
	l.passes = make([][]queryStats, len(l.queryStores))
	wcfg := cfg
	wcfg.Mode, wcfg.Create, wcfg.Candidates = sink.Write, false, 0
	if l.writer, err = sink.OpenIndex(ctx, pool, wcfg); err != nil {
		return l, err
	}
	return l, nil
}

// queryRound runs one timed pass (after a warm-up pass) per candidate
// count.
func (l *live) queryRound(ctx context.Context, o runOpts, vs *vectors) error {
	for i, st := range l.queryStores {
		q, err := runQueries(ctx, l.pool, l.schema, st, vs, o)
		if err != nil {
			return err
		}
		l.passes[i] = append(l.passes[i], q)
	}
	return nil
}

// insert upserts docs through the Write-mode store from o.workers
// writers (the sink groups concurrent ones into shared transactions).
func (l *live) insert(ctx context.Context, o runOpts, docs []sink.Document) error {
	start := time.Now()
	if err := streamLoad(ctx, l.writer, docs, o.workers); err != nil {
		return err
	}
	l.insSecs += time.Since(start).Seconds()
	for _, d := range docs {
		l.inserted += len(d.Chunks)
	}
	return nil
}

// finish checks the row count after the inserts and summarises the
// rounds: per candidate count, the median over rounds of each pass's p50
// and p99 and the mean recall.
func (l *live) finish(ctx context.Context, nBuild int) (result, error) {
	var total int64
	if err := l.pool.QueryRow(ctx, "SELECT count(*) FROM "+l.schema+".chunks").Scan(&total); err != nil {
		return l.res, err
	}
	if want := int64(nBuild + l.inserted); total != want {
		return l.res, fmt.Errorf("the index holds %d chunks after the inserts, want %d", total, want)
	}
	l.res.inserted = l.inserted
	if l.insSecs > 0 {
		l.res.insertRate = float64(l.inserted) / l.insSecs
	}
	for _, passes := range l.passes {
		l.res.queries = append(l.res.queries, summarise(passes))
	}
	return l.res, nil
}

// summarise is the median p50 and p99 of the passes, their mean recall
// and every pass's searches.
func summarise(passes []queryStats) queryStats {
	q := passes[0]
	var p50s, p99s []time.Duration
	q.recall, q.indexed, q.n = 0, 0, 0
	for _, p := range passes {
		p50s, p99s = append(p50s, p.p50), append(p99s, p.p99)
		q.recall += p.recall
		q.indexed += p.indexed
		q.n += p.n
	}
	q.recall /= float64(len(passes))
	q.p50, q.p99 = percentile(p50s, 0.5), percentile(p99s, 0.5)
	q.rounds = len(passes)
	return q
}

// drop closes the pool and drops the schema (unless -keep).
func (l *live) drop(o runOpts) error {
	if l.pool != nil {
		l.pool.Close()
	}
	if o.keepSchema {
		fmt.Printf("  schema %s kept (-keep)\n", l.schema)
		return nil
	}
	// The run's context may be cancelled: drop with a fresh one.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, o.url)
	if err != nil {
		return fmt.Errorf("drop schema %s: %w (drop it by hand)", l.schema, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+l.schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w (drop it by hand)", l.schema, err)
	}
	return nil
}

// runDims builds an index of each type at vs's dimensions, then alternates
// their query passes and their share of the online inserts over o.rounds
// rounds (each round starting with the next type), and drops them.
func runDims(ctx context.Context, o runOpts, types []sink.VectorType, vs *vectors) (rs []result, err error) {
	var lives []*live
	defer func() {
		for _, l := range lives {
			if derr := l.drop(o); derr != nil && err == nil {
				err = derr
			}
		}
	}()
	for _, t := range types {
		l, err := build(ctx, o, t, vs)
		lives = append(lives, l)
		if err != nil {
			return nil, fmt.Errorf("%s at %d dims: %w", t, vs.dims, err)
		}
	}
	// Each index gets documents of its own (the sink may fill in fields).
	firstDoc := (len(vs.build) + o.perDoc - 1) / o.perDoc
	insDocs := make([][]sink.Document, len(lives))
	for i := range lives {
		insDocs[i] = makeDocs(vs.insertTexts, vs.insert, o.perDoc, firstDoc)
	}
	rounds := max(1, o.rounds)
	for r := range rounds {
		for i := range lives {
			l := lives[(i+r)%len(lives)]
			if err := l.queryRound(ctx, o, vs); err != nil {
				return nil, fmt.Errorf("%s at %d dims: %w", l.res.typ, vs.dims, err)
			}
		}
	}
	// The inserts last, so every query pass searched the N built chunks.
	for r := range rounds {
		for i := range lives {
			j := (i + r) % len(lives)
			l, docs := lives[j], insDocs[j]
			if err := l.insert(ctx, o, docs[r*len(docs)/rounds:(r+1)*len(docs)/rounds]); err != nil {
				return nil, fmt.Errorf("%s at %d dims: %w", l.res.typ, vs.dims, err)
			}
		}
	}
	for _, l := range lives {
		r, err := l.finish(ctx, len(vs.build))
		if err != nil {
			return nil, fmt.Errorf("%s at %d dims: %w", l.res.typ, vs.dims, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
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
