// Command monitor measures what the monitor costs the write path (issue
// 14). It puts one backlog of Debezium events (each with a W3C traceparent,
// so the monitor's trace recording runs) on an in-process Kafka (kfake)
// and drains it with `ragsync serve --once` as a child process, with the
// monitor off and with it on (`--monitor`, a check every interval of
// -intervals with a stored-vector sample of -sample chunks: 60–300× hotter
// than the 5m default, so its cost shows), rotating the order each round,
// each run into a fresh schema with its own consumer group.
//
// Events/s on a machine shared with other work varies by 2× between runs
// of one mode, so the gate is CPU time instead: the CPU per event of the
// whole write path — the child's user+system time (its rusage) plus that of
// its Postgres backends (found by application_name, read from /proc every
// 100 ms, so up to 100 ms of each backend's tail is missed). On a saturated
// machine throughput goes as the inverse of that total, and Postgres is
// most of it (~6× ragsync's own CPU here), so its ratio off/on (the median
// over rounds of each round's ratio) is the throughput the monitor leaves
// ("throughput-equivalent"; goal ≥ 0.95 at the -gate interval; a check
// costs a fixed amount of CPU, so the ratio at a shorter interval is
// reported, not gated). ragsync's own CPU ratio is reported beside it: it
// reads lower, since a check's cost is all in ragsync and the sample's
// reads. It also reports events/s, peak RSS and the monitor's checks and
// token spend, and fails when an "on" run did not check at least twice: a
// monitor that never ran costs nothing.
//
//	go run ./bench/monitor -bin bin/ragsync [-events 3000] [-rounds 5] [-intervals 5s] [-gate 5s] [-sample 64]
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/bench/internal/child"
	"github.com/ragsync/ragsync/internal/orphan"
)

const topic = "dbserver1.public.articles"

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

func main() {
	bin := flag.String("bin", "bin/ragsync", "ragsync binary")
	events := flag.Int("events", 3000, "events in the backlog (enough for the \"on\" runs to check at least twice)")
	docs := flag.Int("docs", 600, "distinct documents")
	rounds := flag.Int("rounds", 5, "runs of each mode, rotating which goes first")
	intervals := flag.String("intervals", "5s", "monitor.interval values to run the monitor at, each its own \"on\" mode (at least 1s)")
	gate := flag.Duration("gate", 5*time.Second, "the interval whose CPU ratio is held to -min-ratio (shorter ones are reported: their cost is per check)")
	sample := flag.Int("sample", 64, "monitor.sample_size while on")
	minRatio := flag.Float64("min-ratio", 0.95, "fail when write-path CPU/event off ÷ on is below this")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	flag.Parse()
	var ivs []time.Duration
	for _, f := range strings.Split(*intervals, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < time.Second {
			fmt.Fprintf(os.Stderr, "bench monitor: -intervals: %q is not a duration of at least 1s\n", f)
			os.Exit(2)
		}
		ivs = append(ivs, d)
	}
	if !slices.Contains(ivs, *gate) {
		fmt.Fprintf(os.Stderr, "bench monitor: -gate %s is not one of -intervals %s\n", *gate, *intervals)
		os.Exit(2)
	}
	b := bench{bin: *bin, events: *events, docs: *docs, sample: *sample, pgURL: *pgURL}
	if err := b.run(*rounds, ivs, *gate, *minRatio); err != nil {
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

type bench struct {
	bin            string
	events, docs   int
	sample         int
	pgURL, brokers string
}

// result is one drain.
type result struct {
	seconds        float64
	cpu, pgCPU     float64 // seconds
	rssMiB         float64
	checks, failed float64
	monEvents      float64
	tokens         float64
}

func (r result) perEvent(cpu float64, events int) float64 { return 1000 * cpu / float64(events) }

func (b *bench) run(rounds int, intervals []time.Duration, gate time.Duration, minRatio float64) error {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic), kfake.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer c.Close()
	b.brokers = strings.Join(c.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 0; i < b.events; {
		var recs []*kgo.Record
		for ; i < b.events && len(recs) < 1000; i++ {
			recs = append(recs, event(i, b.docs))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("backlog: %d events over %d documents, each with a traceparent; \"on\" = serve --once --monitor, sample %d, at monitor.interval %v\n",
		b.events, b.docs, b.sample, intervals)

	// Mode 0 is off; mode i > 0 runs the monitor at intervals[i-1]. The
	// order rotates each round so no mode always runs first.
	modes := len(intervals) + 1
	res := make([][]result, modes)
	for r := range rounds {
		for k := range modes {
			mode := (r + k) % modes
			var iv time.Duration
			if mode > 0 {
				iv = intervals[mode-1]
			}
			x, err := b.once(ctx, r, iv)
			if err != nil {
				return err
			}
			res[mode] = append(res[mode], x)
			name := "off"
			if mode > 0 {
				name = "on@" + iv.String()
			}
			fmt.Printf("round %d %-8s %5.0f events/s  cpu %.3f ms/event  postgres %.3f ms/event  rss %5.1f MiB  checks %.0f (failed %.0f) events %.0f tokens %.0f\n",
				r+1, name, float64(b.events)/x.seconds, x.perEvent(x.cpu, b.events), x.perEvent(x.pgCPU, b.events),
				x.rssMiB, x.checks, x.failed, x.monEvents, x.tokens)
		}
	}
	med := func(rs []result, f func(result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		slices.Sort(xs)
		if len(xs)%2 == 0 {
			return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
		}
		return xs[len(xs)/2]
	}
	rate := func(r result) float64 { return float64(b.events) / r.seconds }
	cpu := func(r result) float64 { return r.perEvent(r.cpu, b.events) }
	pg := func(r result) float64 { return r.perEvent(r.pgCPU, b.events) }
	total := func(r result) float64 { return r.perEvent(r.cpu+r.pgCPU, b.events) }
	rss := func(r result) float64 { return r.rssMiB }
	checks := func(r result) float64 { return r.checks }
	tokens := func(r result) float64 { return r.tokens }
	off := res[0]
	fmt.Printf("\nmedians over %d runs of each mode (off: ragsync %.3f ms CPU/event, Postgres %.3f, %.0f events/s, peak RSS %.1f MiB):\n",
		rounds, med(off, cpu), med(off, pg), med(off, rate), med(off, rss))
	var failure error
	for i, iv := range intervals {
		on := res[i+1]
		// Runs of one round are adjacent in time, so they share the
		// machine's load more than runs rounds apart: the median of the
		// per-round ratios is the gate, the ratio of medians is shown.
		perRound := func(f func(result) float64) float64 {
			xs := make([]result, len(on))
			for r := range on {
				xs[r] = result{cpu: f(off[r]) / f(on[r])}
			}
			return med(xs, func(r result) float64 { return r.cpu })
		}
		ratio := perRound(total)
		perCheck := (med(on, cpu) - med(off, cpu)) * float64(b.events) / max(med(on, checks), 1)
		fmt.Printf("  on@%-4s write-path CPU/event (ragsync + its Postgres backends) %.3f ms: throughput-equivalent off/on %.3f per round (median), %.3f of medians",
			iv, med(on, total), ratio, med(off, total)/med(on, total))
		if iv == gate {
			fmt.Printf(" (gate, per round: >= %.2f)", minRatio)
			if ratio < minRatio {
				failure = fmt.Errorf("at monitor.interval %s, write-path CPU per event with the monitor on is %.3f× off (throughput-equivalent %.1f%%), below %.0f%%",
					iv, 1/ratio, 100*ratio, 100*minRatio)
			}
		}
		fmt.Printf("\n          ragsync alone off/on %.3f per round, %.3f of medians; events/s on/off %.3f (wall clock, noisy); peak RSS %.1f MiB (max %.1f)\n",
			perRound(cpu), med(off, cpu)/med(on, cpu), med(on, rate)/med(off, rate), med(on, rss), slices.MaxFunc(on, func(a, b result) int { return cmpF(a.rssMiB, b.rssMiB) }).rssMiB)
		fmt.Printf("          monitor: %.0f checks a run, %.0f tokens a check", med(on, checks), med(on, tokens)/max(med(on, checks), 1))
		if perCheck > 0 {
			fmt.Printf(", ~%.1f ms ragsync CPU a check: at the default 5m interval and this throughput, %.3f%% of the write path's CPU\n",
				perCheck, 100*perCheck/(perCheck+med(off, cpu)*med(off, rate)*300))
		} else {
			fmt.Printf("; CPU per event on ≤ off: the monitor's cost is below the run-to-run noise at this interval\n")
		}
	}
	return failure
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// once drains the backlog with a fresh schema and consumer group; the
// monitor runs at interval, or not at all when it is 0.
func (b *bench) once(ctx context.Context, round int, interval time.Duration) (result, error) {
	withMonitor := interval > 0
	var rb [5]byte
	_, _ = crand.Read(rb[:])
	tag := "bench_mon_" + hex.EncodeToString(rb[:])
	defer func() {
		if conn, err := pgx.Connect(ctx, b.pgURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+tag+" CASCADE")
			_ = conn.Close(ctx)
		}
	}()
	dir, err := os.MkdirTemp("", "benchmon")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	sep := "?"
	if strings.Contains(b.pgURL, "?") {
		sep = "&"
	}
	cfg := filepath.Join(dir, "ragsync.yaml")
	yaml := fmt.Sprintf(`source:
  kind: kafka
  kafka:
    brokers: [%s]
    topics: [%s]
    group: %s
`, b.brokers, topic, tag) + child.Settings("public.articles", b.pgURL+sep+"application_name="+tag, tag, "bench") + fmt.Sprintf(`log:
  level: warn
monitor:
  interval: %s
  sample_size: %d
  reference_size: 500
  window_size: 500
  topic: ragsync.monitor.bench
`, max(interval, time.Second), b.sample)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return result{}, err
	}
	args := []string{"serve", "--once", "--config", cfg}
	if withMonitor {
		args = append(args, "--monitor")
	}
	cmd := orphan.DieWithParent(exec.Command(b.bin, args...))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	pg := newBackendCPU(ctx, b.pgURL, tag)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	stopPG := pg.poll(100 * time.Millisecond)
	err = cmd.Wait()
	elapsed := time.Since(start)
	pgCPU := stopPG()
	if err != nil {
		return result{}, fmt.Errorf("serve (round %d, monitor %v): %w\n%s%s", round+1, withMonitor, err, out.String(), tail(errOut.String()))
	}
	res := result{seconds: elapsed.Seconds(), pgCPU: pgCPU,
		cpu: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.rssMiB = float64(ru.Maxrss) / 1024 // kB on Linux
	}
	drained := 0
	for _, f := range strings.Fields(out.String()) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		switch {
		case strings.HasPrefix(k, "op_"):
			drained += int(n)
		case k == "checks":
			res.checks = n
		case k == "checks_failed":
			res.failed = n
		case k == "events":
			res.monEvents = n
		case k == "tokens":
			res.tokens = n
		}
	}
	if drained < b.events {
		return result{}, fmt.Errorf("serve stopped after %d of %d events: %s", drained, b.events, strings.TrimSpace(out.String()))
	}
	if withMonitor && (res.checks-res.failed < 2 || res.monEvents == 0) {
		return result{}, fmt.Errorf("the monitor did not run during the drain (%.0f checks ok, %.0f events): the 'on' figure would mean nothing; raise -events or lower -interval\n%s",
			res.checks-res.failed, res.monEvents, out.String())
	}
	if !withMonitor && res.checks > 0 {
		return result{}, fmt.Errorf("the monitor ran without --monitor: %s", out.String())
	}
	return res, nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// backendCPU sums the CPU time of the Postgres backends serving one
// application_name, sampled from /proc: a backend's last reading before it
// exits is what counts.
type backendCPU struct {
	ctx      context.Context
	url, app string
	mu       sync.Mutex
	ticks    map[int]int64
}

func newBackendCPU(ctx context.Context, url, app string) *backendCPU {
	return &backendCPU{ctx: ctx, url: url, app: app, ticks: map[int]int64{}}
}

func (p *backendCPU) poll(every time.Duration) (stop func() float64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(p.ctx, p.url)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(p.ctx))
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			p.sample(conn)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		var sum int64
		for _, v := range p.ticks {
			sum += v
		}
		return float64(sum) / clockTicks
	}
}

func (p *backendCPU) sample(conn *pgx.Conn) {
	rows, err := conn.Query(p.ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", p.app)
	if err != nil {
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pid := range pids {
		if t, ok := procCPU(int(pid)); ok {
			p.ticks[int(pid)] = max(p.ticks[int(pid)], t)
		}
	}
}

// procCPU is utime+stime of pid in clock ticks.
func procCPU(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces; fields count from after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64) // field 14: utime
	s, err2 := strconv.ParseInt(f[12], 10, 64) // field 15: stime
	return u + s, err1 == nil && err2 == nil
}

// event is the i-th change of the shared backlog, carrying a traceparent
// of its own.
func event(i, docs int) *kgo.Record {
	r := backlog.Event(i, docs)
	tp := fmt.Sprintf("00-%016x%016x-%016x-01", 0x7261677379+uint64(i), uint64(i)+1, uint64(i)+1)
	r.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp)}}
	return r
}
