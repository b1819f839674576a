package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/orphan"
	"github.com/ragsync/ragsync/sink"
)

// result is one load, and the edit run after it when there is one.
type result struct {
	name           string
	latency        time.Duration
	docBytes       int
	docs, chunks   int64
	wall           time.Duration
	cpu, pgCPU     time.Duration
	pgAll          time.Duration // every Postgres process, see pgUsage
	edit           *editResult
	requests       int64
	inputs         int64
	trips, xacts   int64
	summaryOutcome string
	raw            timing // the raw limit measured before this load's round
	// benchCPU is this process's CPU during the load: the test embedding
	// server (it counts tokens like the API), the round-trip relay and the
	// sampler. On a real deployment it runs elsewhere; here it shares the
	// cores with serve and Postgres.
	benchCPU time.Duration
}

func (r result) chunksPerSec() float64 { return float64(r.chunks) / r.wall.Seconds() }

func (r result) perChunkMs(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(r.chunks)
}

func (r result) ofRaw() float64 { return r.chunksPerSec() / r.raw.rate() }

func (r result) inputsPerRequest() float64 { return float64(r.inputs) / float64(max(r.requests, 1)) }

// selfCPU is this process's user+system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r result) line() string {
	s := fmt.Sprintf("%s latency=%s: %d docs, %d chunks in %s = %.0f chunks/s (%.2f of raw), CPU %.3f ms/chunk, PG CPU %.3f ms/chunk (all processes %.3f), bench CPU %.3f ms/chunk, %d requests for %d inputs, %.1f round trips/doc, %.2f tx/doc",
		r.name, r.latency, r.docs, r.chunks, r.wall.Round(time.Millisecond), r.chunksPerSec(), r.ofRaw(),
		r.perChunkMs(r.cpu), r.perChunkMs(r.pgCPU), r.perChunkMs(r.pgAll), r.perChunkMs(r.benchCPU), r.requests, r.inputs,
		float64(r.trips)/float64(r.docs), float64(r.xacts)/float64(r.docs))
	if r.edit != nil {
		s += "; " + r.editLine()
	}
	return s
}

// editLine describes the edit run after the load.
func (r result) editLine() string {
	if r.edit == nil {
		return "no edit run"
	}
	e := r.edit
	return fmt.Sprintf("edit of %d docs in %s: CPU %.3f ms/doc (%.2f of the load's CPU), PG CPU %.3f ms/doc (%.2f of the load's), all processes %.3f ms/doc (%.2f of the load's), %d chunk rows written, %d texts embedded in %d requests",
		e.docs, e.wall.Round(time.Millisecond), e.perDocMs(e.cpu), r.editShare(e.cpu, r.cpu),
		e.perDocMs(e.pg.backends), r.editShare(e.pg.backends, r.pgCPU), e.perDocMs(e.pg.all), r.editShare(e.pg.all, r.pgAll),
		e.written, e.inputs, e.reqs)
}

// editShare is the edit's CPU per document (edit, over the edit's
// documents) as a share of the load's (load, over the loaded documents).
func (r result) editShare(edit, load time.Duration) float64 {
	if r.edit == nil || r.edit.docs == 0 || load == 0 {
		return 0
	}
	return (float64(edit) / float64(r.edit.docs)) / (float64(load) / float64(r.docs))
}

func (r result) row() string {
	return fmt.Sprintf("| %s | %s | %d | %d | %.1f | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f | 1/%.1f | %.1f | %.2f |",
		r.name, r.latency, r.docs, r.chunks, r.wall.Seconds(), r.chunksPerSec(), r.ofRaw(),
		r.perChunkMs(r.cpu), r.perChunkMs(r.pgCPU), r.perChunkMs(r.pgAll), r.perChunkMs(r.pgAll)/r.raw.perRowMs(r.raw.pgAll),
		r.inputsPerRequest(), float64(r.trips)/float64(r.docs), float64(r.xacts)/float64(r.docs))
}

// editResult is a run of `serve --once` over an update of every loaded
// document that changes -edit-chars characters of its text and its status
// (see corpus.writeEdits).
type editResult struct {
	docs    int64 // documents that took their edit (stored commit time is the edit's)
	written int64 // chunk rows the edit inserted (new content)
	inputs  int64 // texts sent to the embedding server
	reqs    int64 // requests they went in
	wall    time.Duration
	cpu     time.Duration // serve's
	pg      pgUsage
}

func (e editResult) perDocMs(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(e.docs)
}

// tbShim lets openaitest.New, which takes a testing.TB to register the
// server's shutdown, run in a program (as in bench/incremental): New calls
// only Helper and Cleanup.
type tbShim struct {
	testing.TB
	cleanups []func()
}

func (s *tbShim) Helper()          {}
func (s *tbShim) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// loadOnce loads the events of c (written to events) with bin into a fresh
// database and, when edits is not empty, applies them after the load in a
// second run.
func loadOnce(ctx context.Context, o options, bin string, c *corpus, events, edits string, latency time.Duration) (result, error) {
	var res result
	db, err := createDatabase(ctx, o.adminURL)
	if err != nil {
		return res, err
	}
	defer db.drop(ctx)
	u, err := url.Parse(db.url)
	if err != nil {
		return res, err
	}
	rl, err := newRelay(u.Host)
	if err != nil {
		return res, err
	}
	defer rl.close()
	u.Host = rl.addr()
	if o.poolConns > 0 || o.pgParams != "" {
		q := u.Query()
		if o.poolConns > 0 {
			q.Set("pool_max_conns", fmt.Sprint(o.poolConns))
		}
		for _, kv := range strings.Split(o.pgParams, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && bin == o.bin {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
	}

	shim := &tbShim{}
	srv := openaitest.New(shim, openaitest.Options{Dimensions: o.dims})
	defer func() {
		for i := len(shim.cleanups) - 1; i >= 0; i-- {
			shim.cleanups[i]()
		}
	}()
	if latency > 0 {
		srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: latency} })
	}

	dir, err := os.MkdirTemp("", "throughput-run")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ragsync.yaml")
	encoding := ""
	if o.base64New && bin == o.bin {
		encoding = "  encoding_format: base64\n"
	}
	fullText := ""
	if o.fullTextNew && bin == o.bin {
		fullText = "  full_text: true\n"
	}
	tables := tableConfig
	fields := o.fieldsNew && bin == o.bin
	if fields {
		tables += fieldsConfig
	}
	yamlFor := func(events string) string {
		return fmt.Sprintf(`source:
  kind: file
  file:
    path: %s
%sembedder:
  provider: openai
  base_url: %s
  model: text-embedding-3-small
  dimensions: %d
  api_key: bench
%spostgres:
  url: %s
  schema: ragsync
%sindex: throughput
http:
  listen: ""
`, events, tables, srv.URL, o.dims, encoding, u.String(), fullText)
	}
	if err := os.WriteFile(cfg, []byte(yamlFor(events)), 0o644); err != nil {
		return res, err
	}
	// Migrations run before the load: serve applies them too, but their
	// cost is not the write path's.
	mig := orphan.DieWithParent(exec.CommandContext(ctx, bin, "migrate", "--config", cfg))
	if out, err := mig.CombinedOutput(); err != nil {
		return res, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	if o.dropNew != "" && bin == o.bin {
		// Pricing an index: the same binary as -base-bin, without it.
		for _, idx := range strings.Split(o.dropNew, ",") {
			if err := execAll(ctx, db, "DROP INDEX ragsync."+pgx.Identifier{strings.TrimSpace(idx)}.Sanitize()); err != nil {
				return res, err
			}
		}
	}
	x0, err := db.xacts(ctx)
	if err != nil {
		return res, err
	}
	trips0 := rl.trips.Load()

	stop := make(chan struct{})
	pgCPU := db.backendCPU(ctx, stop)
	args := []string{"serve", "--once", "--config", cfg}
	if o.cpuProfile != "" && bin == o.bin {
		args = append(args, "--cpu-profile", fmt.Sprintf("%s-%s.pprof", o.cpuProfile, latency))
	}
	cmd := orphan.DieWithParent(exec.CommandContext(ctx, bin, args...))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	self0 := selfCPU()
	start := time.Now()
	err = cmd.Run()
	res.wall = time.Since(start)
	res.benchCPU = selfCPU() - self0
	close(stop)
	pg := pgCPU()
	res.pgCPU, res.pgAll = pg.backends, pg.all
	if err != nil {
		return res, fmt.Errorf("serve: %w\n%s", err, out.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	res.trips = rl.trips.Load() - trips0
	res.requests, res.inputs = srv.Requests.Load(), srv.Inputs.Load()
	time.Sleep(1100 * time.Millisecond) // let exited backends' statistics land
	x1, err := db.xacts(ctx)
	if err != nil {
		return res, err
	}
	res.xacts = x1 - x0
	pool, err := pgxpool.New(ctx, db.url)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// What the child wrote, read through the index's owner.
	cat := sink.NewCatalog(pool, "ragsync")
	w, err := cat.Writes(ctx, 0)
	if err != nil {
		return res, err
	}
	res.docs, res.chunks = w.Documents, w.Chunks
	if res.docs == 0 || res.chunks == 0 {
		return res, fmt.Errorf("nothing loaded: %s", out.String())
	}
	if edits == "" {
		return res, nil
	}

	// The edit run: a config that reads the edit events instead, the same
	// database, embedding server and relay.
	editCfg := filepath.Join(dir, "ragsync-edit.yaml")
	if err := os.WriteFile(editCfg, []byte(yamlFor(edits)), 0o644); err != nil {
		return res, err
	}
	lastID := w.LastChunk
	inputs0, reqs0 := srv.Inputs.Load(), srv.Requests.Load()
	stop = make(chan struct{})
	pgCPU = db.backendCPU(ctx, stop)
	args = []string{"serve", "--once", "--config", editCfg}
	if o.cpuProfile != "" && bin == o.bin {
		args = append(args, "--cpu-profile", fmt.Sprintf("%s-%s-edit.pprof", o.cpuProfile, latency))
	}
	cmd = orphan.DieWithParent(exec.CommandContext(ctx, bin, args...))
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	start = time.Now()
	err = cmd.Run()
	e := &editResult{wall: time.Since(start)}
	close(stop)
	e.pg = pgCPU()
	if err != nil {
		return res, fmt.Errorf("serve (edits): %w\n%s", err, out.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		e.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	e.inputs, e.reqs = srv.Inputs.Load()-inputs0, srv.Requests.Load()-reqs0
	if w, err = cat.Writes(ctx, lastID); err != nil {
		return res, err
	}
	e.written = w.ChunksAfter
	// Documents that took their update: those whose stored commit time is
	// their edit's (every event's is distinct). An update's edit magnitude
	// would not do: a metadata-only update records none.
	if e.docs, err = tookEdits(ctx, cat, c); err != nil {
		return res, err
	}
	if e.docs != res.docs {
		return res, fmt.Errorf("%d of %d documents took their edit: %s", e.docs, res.docs, out.String())
	}
	if fields {
		// The edit's status reached each document's metadata, where a
		// filter finds it: read through the index's view, as SQL users do.
		var tagged int64
		err := pool.QueryRow(ctx, "SELECT count(DISTINCT doc_id) FROM "+pgx.Identifier{"ragsync", sink.IndexView("throughput")}.Sanitize()+
			" WHERE metadata @> $1::jsonb", fmt.Sprintf(`{"semantic_tag": %q}`, editStatus)).Scan(&tagged)
		if err != nil {
			return res, err
		}
		if tagged != res.docs {
			return res, fmt.Errorf("%d of %d documents have the edit's metadata (semantic_tag %s)", tagged, res.docs, editStatus)
		}
	}
	res.edit = e
	return res, nil
}

// tookEdits counts the documents of the index whose stored commit time is
// their edit event's (c.editTS) and whose stored row has the edit's status.
func tookEdits(ctx context.Context, cat *sink.Catalog, c *corpus) (int64, error) {
	var n int64
	after := ""
	for {
		page, err := cat.StoredRows(ctx, "throughput", after, 1000)
		if err != nil {
			return 0, err
		}
		if len(page) == 0 {
			return n, nil
		}
		for _, r := range page {
			after = r.ID
			d, err := strconv.Atoi(r.Key)
			if err != nil || d < 0 || d >= len(c.titles) || r.Deleted || r.SourceTS == nil {
				continue
			}
			var row struct{ Status string }
			if json.Unmarshal(r.Row, &row) != nil || row.Status != editStatus {
				continue
			}
			if r.SourceTS.UnixMilli() == c.editTS(d) {
				n++
			}
		}
	}
}
