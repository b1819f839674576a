package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// tbShim lets openaitest.New, which takes a testing.TB to register the
// server's shutdown, run in a program: New calls only Helper and Cleanup.
type tbShim struct {
	testing.TB
	cleanups []func()
}

func (s *tbShim) Helper()          {}
func (s *tbShim) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *tbShim) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// fake starts a fake provider; limited enforces the key's limits.
func (w *world) fake(limited bool) (*openaitest.Server, func()) {
	shim := &tbShim{}
	opts := openaitest.Options{Dimensions: w.o.dims}
	if limited {
		opts.Limits = openaitest.Limits{RequestsPerMinute: w.o.rpm, TokensPerMinute: w.o.tpm, Quantum: w.o.quantum}
	}
	srv := openaitest.New(shim, opts)
	if w.o.latency > 0 {
		// A provider takes time to answer; with none, the fleet's
		// freshness would be only CPU and Postgres.
		srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: w.o.latency} })
	}
	return srv, shim.close
}

// results are the figures of the table.
type results struct {
	live, mixed     admitted // phase 1 and 2 windows
	whole           admitted // the budget run from start to end of the drain
	p99Live, p99Mix float64
	// waitLive and waitMix are the live lane's mean wait for the budget
	// per request, without and with the backfill.
	waitLive, waitMix time.Duration
	nLive, nMix       float64
	windowCut         bool // the backfill ended before phase 2's window
	produced          int64
	applied           float64
	duplicates        float64
	backfillRows      int
	cmp               comparison
	control           *admitted
	controlWhole      *admitted
}

func run(ctx context.Context, o options) error {
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	dir, err := os.MkdirTemp("", "bench-fleet")
	if err != nil {
		return err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	w := &world{o: o, topic: "dbserver1.public.articles", src: unique("bench_fleet_src_"), dir: dir}

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), w.topic))
	if err != nil {
		return err
	}
	undo = append(undo, c.Close)
	w.brokers = c.ListenAddrs()[0]

	conn, err := pgx.Connect(ctx, o.pgURL)
	if err != nil {
		return fmt.Errorf("connect to Postgres (-pg): %w", err)
	}
	undo = append(undo, func() { conn.Close(context.Background()) })
	drop := func(schema string) {
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			warnf("clean up: drop schema %s: %v", schema, err)
		}
	}
	undo = append(undo, func() { drop(w.src) })
	if err := sourceTable(ctx, conn, w.src, o.backfillRows); err != nil {
		return err
	}
	rdb := redis.NewClient(mustRedis(o.redisURL))
	undo = append(undo, func() { rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("reach Redis (-redis): %w", err)
	}
	logf("R %d requests/min, T %d tokens/min, over %s; %d replicas on %d partitions; live %.1f changes/s; backfill %d rows; windows %s after %s",
		o.rpm, o.tpm, o.quantum, o.replicas, o.partitions, o.liveRate, o.backfillRows, o.window, o.warm)

	var res results
	res.backfillRows = o.backfillRows
	shared := runConfig{group: unique("fleet-"), schema: unique("bench_fleet_"), budgetPrefix: unique("ragsync:budget:bench-fleet-")}
	undo = append(undo, func() { drop(shared.schema); delPrefix(rdb, shared.budgetPrefix) })
	if err := w.budgetRun(ctx, shared, &res); err != nil {
		return err
	}

	fresh := runConfig{group: unique("fleet-fresh-"), schema: unique("bench_fleet_fresh_"), unlimited: true}
	undo = append(undo, func() { drop(fresh.schema) })
	if res.cmp, err = w.freshLoad(ctx, conn, fresh, shared.schema); err != nil {
		return err
	}

	if o.control {
		ctl := runConfig{group: unique("fleet-ctl-"), schema: unique("bench_fleet_ctl_")}
		undo = append(undo, func() { drop(ctl.schema) })
		if err := w.controlRun(ctx, ctl, &res); err != nil {
			return err
		}
	}
	report(o, res)
	if res.cmp.differs() {
		return errors.New("the fleet's index differs from a fresh load of the final state")
	}
	return nil
}

// budgetRun is phases 1-3 with the shared budget.
func (w *world) budgetRun(ctx context.Context, rc runConfig, res *results) error {
	o := w.o
	srv, closeSrv := w.fake(true)
	defer closeSrv()
	rc.baseURL = srv.URL
	start := time.Now()
	reps, stopFleet, err := w.fleet(ctx, rc, "budget")
	defer stopFleet()
	if err != nil {
		return err
	}
	logf("%d replicas ready", len(reps))

	prod, err := kgo.NewClient(kgo.SeedBrokers(w.brokers), kgo.ProducerLinger(0), kgo.DefaultProduceTopic(w.topic))
	if err != nil {
		return err
	}
	defer prod.Close()
	liveCtx, stopLive := context.WithCancel(ctx)
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		live(liveCtx, prod, o, o.liveRate, 0, &produced)
	}()
	defer func() { stopLive(); wg.Wait() }()

	// Phase 1: live only.
	m, err := measure(ctx, o, reps)
	if err != nil {
		return err
	}
	res.live = admissions(srv.Admissions(), m.from, m.to)
	res.p99Live, res.nLive = p99(m.a, m.b)
	res.waitLive = laneWait(m.a, m.b, "live")
	logf("live only: %d requests accepted (%.2f of R), p99 %.3fs over %.0f changes", res.live.accepted, res.live.perMinute()/float64(o.rpm), res.p99Live, res.nLive)

	// Phase 2: live and backfill.
	bf, err := w.backfill(rc, "budget")
	if err != nil {
		return err
	}
	defer bf.stop()
	m, err = measure(ctx, o, reps)
	if err != nil {
		return err
	}
	if !bf.running() && bf.done.Before(m.to) {
		res.windowCut = true
		m.to = bf.done
	}
	res.mixed = admissions(srv.Admissions(), m.from, m.to)
	res.p99Mix, res.nMix = p99(m.a, m.b)
	res.waitMix = laneWait(m.a, m.b, "live")
	logf("live + backfill: %d requests accepted (%.3f of R), %d throttled, p99 %.3fs over %.0f changes",
		res.mixed.accepted, res.mixed.perMinute()/float64(o.rpm), res.mixed.throttled, res.p99Mix, res.nMix)

	// Phase 3: drain.
	stopLive()
	wg.Wait()
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	res.produced = produced.Load()
	logf("live changes stopped after %d; draining", res.produced)
	if err := bf.wait(ctx, o.drainTimeout); err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	deadline := time.Now().Add(o.drainTimeout)
	for {
		s, err := scrapeAll(reps)
		if err != nil {
			return err
		}
		res.applied, res.duplicates = s.changes["applied"], s.changes["duplicate"]
		if res.applied >= float64(res.produced) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replicas applied %.0f of %d live changes within %s (outcomes %v)", res.applied, res.produced, o.drainTimeout, s.changes)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	res.whole = admissions(srv.Admissions(), start, time.Now())
	return nil
}

// controlRun starts the replicas and the backfill without the shared
// budget over the topic's backlog and measures one window.
func (w *world) controlRun(ctx context.Context, rc runConfig, res *results) error {
	o := w.o
	srv, closeSrv := w.fake(true)
	defer closeSrv()
	rc.baseURL = srv.URL
	start := time.Now()
	reps, stopFleet, err := w.fleet(ctx, rc, "control")
	defer stopFleet()
	if err != nil {
		return err
	}
	bf, err := w.backfill(rc, "control")
	if err != nil {
		return err
	}
	defer bf.stop()
	// Demand beyond the key's limit, as in the budget run's second window:
	// changes at one request each at the full limit of every replica,
	// positioned after everything the topic holds so that none is stale.
	prod, err := kgo.NewClient(kgo.SeedBrokers(w.brokers), kgo.ProducerLinger(0), kgo.DefaultProduceTopic(w.topic))
	if err != nil {
		return err
	}
	defer prod.Close()
	liveCtx, stopLive := context.WithCancel(ctx)
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		live(liveCtx, prod, o, float64(o.replicas*o.rpm)/60, 1<<40, &produced)
	}()
	defer func() { stopLive(); wg.Wait() }()
	logf("control: %d replicas and the backfill without a shared budget, changes at %d/s", len(reps), o.replicas*o.rpm/60)
	if err := sleep(ctx, o.warm); err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleep(ctx, o.window); err != nil {
		return err
	}
	a := admissions(srv.Admissions(), t0, time.Now())
	whole := admissions(srv.Admissions(), start, time.Now())
	res.control, res.controlWhole = &a, &whole
	logf("control: %d accepted (%.3f of R), %d throttled", a.accepted, a.perMinute()/float64(o.rpm), a.throttled)
	return nil
}

// live produces Debezium changes of public.articles at rate a second,
// each committed in the source "now" (its ts_ms) at position lsnBase +
// its number, with a paragraph never seen before, until ctx ends.
func live(ctx context.Context, prod *kgo.Client, o options, rate float64, lsnBase int64, produced *atomic.Int64) {
	every := time.Duration(float64(time.Second) / rate)
	t := time.NewTicker(every)
	defer t.Stop()
	seen := map[int]bool{}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id := i % o.liveDocs
		op := "u"
		if !seen[id] {
			op, seen[id] = "c", true
		}
		now := time.Now()
		lsn := lsnBase + int64(i+1)
		v, _ := json.Marshal(map[string]any{
			"op": op, "ts_ms": now.UnixMilli(), "before": nil,
			"after": map[string]any{"id": id, "title": fmt.Sprintf("Live %d", id), "body": backlog.Para(uint64(lsn) | 1<<42)},
			"source": map[string]any{"connector": "postgresql", "db": "app", "schema": "public", "table": "articles",
				"lsn": lsn, "txId": lsn, "ts_ms": now.UnixMilli()},
		})
		produced.Add(1)
		prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, `{"id":%d}`, id), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				warnf("produce: %v", err)
			}
		})
	}
}

// sourceTable creates the backfill's source table with rows rows of one
// paragraph each, none like another.
func sourceTable(ctx context.Context, conn *pgx.Conn, schema string, rows int) error {
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; CREATE TABLE "+pgx.Identifier{schema, "backlog"}.Sanitize()+" (id int PRIMARY KEY, title text, body text)"); err != nil {
		return fmt.Errorf("create the source table: %w", err)
	}
	_, err := conn.CopyFrom(ctx, pgx.Identifier{schema, "backlog"}, []string{"id", "title", "body"},
		pgx.CopyFromSlice(rows, func(i int) ([]any, error) {
			return []any{i, fmt.Sprintf("Backlog %d", i), backlog.Para(uint64(i) | 1<<41)}, nil
		}))
	if err != nil {
		return fmt.Errorf("fill the source table: %w", err)
	}
	return nil
}

func mustRedis(u string) *redis.Options {
	opt, err := redis.ParseURL(u)
	if err != nil {
		warnf("-redis %q: %v; using 127.0.0.1:6379", u, err)
		return &redis.Options{Addr: "127.0.0.1:6379"}
	}
	return opt
}

// delPrefix deletes the run's own budget keys.
func delPrefix(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		warnf("clean up: Redis keys %s*: %v", prefix, err)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// window is one measured window: the replicas' metrics at its start (a)
// and end (b), and when those were read.
type window struct {
	a, b     scrape
	from, to time.Time
}

// measure lets the fleet settle for o.warm, then reads the replicas'
// metrics at the start and the end of o.window.
func measure(ctx context.Context, o options, reps []*proc) (window, error) {
	var m window
	if err := sleep(ctx, o.warm); err != nil {
		return m, err
	}
	a, err := scrapeAll(reps)
	if err != nil {
		return m, err
	}
	m.a, m.from = a, time.Now()
	if err := sleep(ctx, o.window); err != nil {
		return m, err
	}
	b, err := scrapeAll(reps)
	if err != nil {
		return m, err
	}
	m.b, m.to = b, time.Now()
	return m, nil
}
