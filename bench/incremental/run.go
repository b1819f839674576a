package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// benchIndex names the index in every schema the benchmark creates.
const benchIndex = "bench"

// recallK is the k of recall@k.
const recallK = 5

// runSet replays one data set and measures it.
func runSet(ctx context.Context, cfg config, set string) (*result, error) {
	started := time.Now()
	res := &result{Set: set, Limit: cfg.Limit, Seconds: map[string]float64{}}
	lap := func(name string, since time.Time) { res.Seconds[name] = time.Since(since).Seconds() }

	evs, err := readEvents(filepath.Join(cfg.DataDir, set, "events.jsonl.gz"), 0)
	if err != nil {
		return nil, err
	}
	evs = sampleDocs(evs, cfg.Sample)
	if cfg.Limit > 0 && len(evs) > cfg.Limit {
		evs = evs[:cfg.Limit]
	}
	res.Sample = cfg.Sample
	nInit := 0
	for nInit < len(evs) && evs[nInit].initial() {
		nInit++
	}
	for _, e := range evs[nInit:] {
		if e.initial() {
			return nil, fmt.Errorf("event %d: snapshot read after the first update; the history must start with its snapshot", e.Seq)
		}
	}
	initEvs, updEvs := evs[:nInit], evs[nInit:]
	res.Events, res.InitialEvents, res.UpdateEvents = len(evs), len(initEvs), len(updEvs)
	initLines, err := toLines(initEvs, 0)
	if err != nil {
		return nil, err
	}
	updLines, err := toLines(updEvs, nInit)
	if err != nil {
		return nil, err
	}

	chunkCfg := cfg.ragsyncChunker()
	greedyCfg := chunker.Config{Strategy: chunker.StrategyGreedy, TargetTokens: cfg.TargetTokens, RefineTargetTokens: chunker.RefineOff}.WithDefaults()
	res.Chunker, res.Baseline = chunkCfg, greedyCfg
	chunks, err := chunker.New(chunkCfg)
	if err != nil {
		return nil, err
	}
	greedy, err := chunker.New(greedyCfg)
	if err != nil {
		return nil, err
	}

	// The baselines are pure computation over the same history; they run
	// beside the replay, which mostly waits on Postgres.
	var base [2]phase
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		t := time.Now()
		defer lap("baselines", t)
		b := newBaselines(greedy)
		for i, e := range evs {
			if i%256 == 0 && gctx.Err() != nil {
				return gctx.Err()
			}
			p := &base[1]
			if e.initial() {
				p = &base[0]
			}
			body := ""
			if e.Body != nil {
				body = *e.Body
			}
			b.observe(p, e.Op, e.DocID, body)
		}
		return nil
	})

	srv, err := startEmbeddings(cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Close()

	dbs := newSchemas(cfg.PostgresURL)
	defer dbs.dropAll()
	logger := slog.New(slog.DiscardHandler)
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	mainStore, err := dbs.open(ctx, "", srv, logger)
	if err != nil {
		return nil, err
	}
	emb := &recordingEmbedder{e: srv.Embedder}
	ops := newOpSink(mainStore, evs)

	// Initial load, then updates, each its own pipeline run over the same
	// index so the token counters can be read at the boundary.
	// The monitor's view (fidelity checks) re-embeds through a server of
	// its own, so its tokens are not counted as ragsync's.
	probeSrv, err := startEmbeddings(cfg)
	if err != nil {
		return nil, err
	}
	defer probeSrv.Close()
	var rag [2]ragPhase
	for i, lines := range [][][]byte{initLines, updLines} {
		t := time.Now()
		before := srv.Usage()
		var snap pipeline.Snapshot
		var err error
		if i == 0 {
			snap, err = replay(ctx, cfg, lines, chunkCfg, emb, ops, logger)
		} else {
			// The updates run in segments of source time with the
			// repayment of reuse debt between them.
			snap, res.Debt, err = replayRepaying(ctx, cfg, updEvs, nInit, chunkCfg, emb, ops, mainStore, probeSrv.Embedder, logger)
		}
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", phaseNames[i], err)
		}
		after := srv.Usage()
		byOp, sizes := ops.take()
		rag[i] = ragPhase{
			Usage:         after.minus(before),
			EmbeddedSizes: emb.take(),
			ChunkSizes:    sizes,
			ByOp:          byOp,
			Pipeline:      snap,
		}
		lap("replay_"+phaseNames[i], t)
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i := range rag {
		res.Phases[i] = newPhaseResult(phaseNames[i], rag[i], base[i])
	}

	// Convergence: a fresh index of the final state must hold exactly the
	// replayed index's documents and chunks, up to the chunks the updates
	// refined.
	t := time.Now()
	docs := finalState(evs)
	ids := make([]string, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	finalLines, err := toLines(snapshotEvents(docs, ids), 0)
	if err != nil {
		return nil, err
	}
	freshStore, err := dbs.open(ctx, "_fresh", srv, logger)
	if err != nil {
		return nil, err
	}
	if _, err := replay(ctx, cfg, finalLines, chunkCfg, srv.Embedder, freshStore, logger); err != nil {
		return nil, fmt.Errorf("fresh load: %w", err)
	}
	got, err := readIndex(ctx, mainStore)
	if err != nil {
		return nil, err
	}
	want, err := readIndex(ctx, freshStore)
	if err != nil {
		return nil, err
	}
	var refine func(string) []chunker.Chunk
	if chunks.Refines() {
		refine = chunks.RefineChunk
	}
	res.Convergence = compareIndexes(got, want, refine)
	lap("fresh_load_and_compare", t)

	// Retrieval: the same sentences against ragsync's index and against an
	// index of greedy chunks of the same final state.
	t = time.Now()
	greedyStore, err := dbs.open(ctx, "_greedy", srv, logger)
	if err != nil {
		return nil, err
	}
	if _, err := replay(ctx, cfg, finalLines, greedyCfg, srv.Embedder, greedyStore, logger); err != nil {
		return nil, fmt.Errorf("greedy load: %w", err)
	}
	qs := sampleQueries(docs, ids, cfg.Queries, cfg.Seed)
	texts := make([]string, len(qs))
	for i, q := range qs {
		texts[i] = q.Sentence
	}
	vecs, err := embedAll(ctx, srv.Embedder, texts)
	if err != nil {
		return nil, fmt.Errorf("embed queries: %w", err)
	}
	res.Recall.Queries, res.Recall.K = len(qs), recallK
	if res.Recall.Ragsync, err = recallAtK(ctx, mainStore, qs, vecs, recallK); err != nil {
		return nil, err
	}
	if res.Recall.Greedy, err = recallAtK(ctx, greedyStore, qs, vecs, recallK); err != nil {
		return nil, err
	}
	lap("recall", t)
	// The debt left at the end of the replay is repaid within one more
	// window; then every stored vector is measured.
	t = time.Now()
	res.Debt.RecallBeforeRepay = res.Recall.Ragsync
	if err := finishWindow(ctx, cfg, mainStore, emb, probeSrv.Embedder, res.Debt, logger); err != nil {
		return nil, fmt.Errorf("final repayment: %w", err)
	}
	lap("final_window", t)
	lap("total", started)
	res.Schemas = dbs.created
	res.Embedder = srv.Describe()
	return res, nil
}

var phaseNames = [2]string{"initial", "updates"}

// replay runs the real pipeline over lines into store until they are all
// applied. A dead letter or a skipped change other than Debezium's
// tombstones means the benchmark did not measure what it claims, so it
// fails the run.
func replay(ctx context.Context, cfg config, lines [][]byte, split chunker.Config, emb pipeline.Embedder, store pipeline.Index, logger *slog.Logger) (pipeline.Snapshot, error) {
	return replayWith(ctx, cfg, lines, split, emb, store, pipeline.ReuseConfig{}, logger)
}

// replayWith is replay with reuse settings. The pipeline is built as serve
// builds it (service.NewPipeline), chunking with split.
func replayWith(ctx context.Context, cfg config, lines [][]byte, split chunker.Config, emb pipeline.Embedder, store pipeline.Index, reuse pipeline.ReuseConfig, logger *slog.Logger) (pipeline.Snapshot, error) {
	pc := service.PipelineConfig{
		Pipeline: pipeline.Config{
			Tables:  []pipeline.TableConfig{{Match: benchTable, Text: "{{body}}", ID: []string{"id"}}},
			Workers: cfg.Workers,
			Reuse:   reuse,
		},
		Chunker: split,
	}
	p, err := service.NewPipeline(pc, service.Stages{
		Source: newMemSource(lines, 256),
		Target: pipeline.Target{Name: "bench", Index: store, Embedder: emb},
	}, reuse.Predictor, nil, logger)
	if err != nil {
		return nil, err
	}
	if err := p.Run(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snap := p.Stats()
	for k, n := range snap {
		switch {
		case k == "skipped_"+cdc.SkipTombstone:
		case k == "dead_lettered", k == "stale", k == "duplicate", k == "unmatched_table",
			strings.HasPrefix(k, "skipped"):
			return snap, fmt.Errorf("pipeline %s=%d: the replay did not apply every change (%s)", k, n, snap)
		}
	}
	return snap, nil
}

// embedAll embeds texts in request-sized batches.
func embedAll(ctx context.Context, e pipeline.Embedder, texts []string) ([][]float32, error) {
	const batch = 64
	out := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += batch {
		vs, err := e.Embed(ctx, texts[i:min(i+batch, len(texts))])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	if len(out) != len(texts) {
		return nil, fmt.Errorf("got %d vectors for %d texts", len(out), len(texts))
	}
	return out, nil
}

// recordingEmbedder passes Embed through and keeps the token count of every
// text sent, for the size distribution of the chunks actually embedded.
type recordingEmbedder struct {
	e     pipeline.Embedder
	mu    sync.Mutex
	sizes []int
}

func (r *recordingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return r.EmbedCounted(ctx, texts, nil)
}

// EmbedCounted passes the chunker's counts on and records them; a text
// without one is counted here, the way the other arms count them.
func (r *recordingEmbedder) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	vs, err := r.e.EmbedCounted(ctx, texts, tokens)
	if err != nil {
		return vs, err
	}
	sizes := make([]int, len(texts))
	for i, t := range texts {
		if i < len(tokens) {
			sizes[i] = tokens[i]
		} else {
			sizes[i] = chunker.CountTokens(t)
		}
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, sizes...)
	r.mu.Unlock()
	return vs, nil
}

func (r *recordingEmbedder) take() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sizes
	r.sizes = nil
	return s
}

// schemas creates the benchmark's schemas (one random stem per run, so runs
// by several people on one database never collide) and drops every one of
// them, and only them, at the end.
type schemas struct {
	url     string
	stem    string
	created []string
	pools   []*pgxpool.Pool
}

func newSchemas(url string) *schemas {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &schemas{url: url, stem: "bench_incr_" + hex.EncodeToString(b[:])}
}

// open creates, migrates and opens schema stem+suffix with the benchmark's
// index in it.
func (s *schemas) open(ctx context.Context, suffix string, srv *embeddings, logger *slog.Logger) (*sink.Store, error) {
	schema := s.stem + suffix
	pool, err := sink.OpenPool(ctx, s.url, schema)
	if err != nil {
		return nil, err
	}
	s.pools = append(s.pools, pool)
	s.created = append(s.created, schema)
	if err := migrations.Up(ctx, pool, schema, logger); err != nil {
		return nil, err
	}
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write,
		Schema: schema, Index: benchIndex, Model: srv.Model, Dimensions: srv.Dimensions, Logger: logger,
	})
	return st, err
}

// dropAll closes the pools and drops the schemas, even after ctx was
// cancelled by a signal.
func (s *schemas) dropAll() {
	for _, p := range s.pools {
		p.Close()
	}
	if len(s.created) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-incremental: drop schemas %v: %v\n", s.created, err)
		return
	}
	defer conn.Close(ctx)
	for _, schema := range s.created {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "bench-incremental: drop schema %s: %v\n", schema, err)
		}
	}
}

// ReportedModel is the wrapped embedder's.
func (r *recordingEmbedder) ReportedModel() string { return r.e.ReportedModel() }
