// Command backlog measures ragsync's memory bound under a Kafka backlog: it
// puts a backlog of Debezium events on an in-process Kafka (kfake), drains it
// with `ragsync serve --once` as a separate process, samples the process's
// peak RSS (VmHWM in /proc/<pid>/status) and reports events/s. It fails when
// the peak exceeds -max-rss-mb, the documented bound. With -base-bin it
// drains the same backlog with that binary too (each run in a consumer
// group and index schema of its own, the binaries alternating over -rounds)
// and reports the medians and the ratios of peak RSS and events/s, new ÷
// base. Each -set runs -bin once more with those `pipeline:` settings (e.g.
// -set max_in_flight_documents=128), as a variant of its own with its own
// ratios, so settings can be compared with one base in one run. With -avro
// the same changes are also written as Debezium's Avro converter writes them,
// framed for a schema registry (an in-process test registry, srtest), to a
// topic of their own, and -bin drains that too: variant new(avro), whose
// events/s is reported as a ratio to new's (the same changes in JSON).
//
//	go run ./bench/backlog -bin bin/ragsync [-base-bin bin/ragsync-base] [-events 200000] [-max-rss-mb 400] [-set key=value,...]... [-avro]
package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/bench/internal/child"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
	"github.com/ragsync/ragsync/internal/orphan"
)

const topic = "dbserver1.public.articles"

// avroTopic holds the same changes in Avro (-avro); avroRegistry is the
// test registry's URL once it runs.
const avroTopic = "dbserver1.public.articles.avro"

var avroRegistry string

// registryYAML is the source.kafka.registry section a drain of topic needs.
func registryYAML(t string) string {
	if t != avroTopic {
		return ""
	}
	return fmt.Sprintf("    registry:\n      url: %s\n", avroRegistry)
}

func main() {
	bin := flag.String("bin", "bin/ragsync", "ragsync binary")
	events := flag.Int("events", 200_000, "events in the backlog")
	docs := flag.Int("docs", 20_000, "distinct documents")
	pgURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL")
	maxRSS := flag.Int("max-rss-mb", 400, "fail when peak RSS exceeds this many MiB (the documented bound)")
	baseBin := flag.String("base-bin", "", "a baseline ragsync binary to drain the same backlog with, for the ratios (optional)")
	rounds := flag.Int("rounds", 1, "drains per binary, alternating when -base-bin is set; medians are reported")
	var sets []string
	flag.Func("set", "`key=value,...`: also drain with -bin and these pipeline: settings (e.g. max_in_flight_documents=128); repeatable, one variant each", func(v string) error {
		if _, err := pipelineYAML(v); err != nil {
			return err
		}
		sets = append(sets, v)
		return nil
	})
	withAvro := flag.Bool("avro", false, "also drain the same changes written in Avro through a schema registry (variant new(avro))")
	flag.Parse()
	if err := run(*bin, *baseBin, sets, *withAvro, *rounds, *events, *docs, *pgURL, *maxRSS); err != nil {
		fmt.Fprintln(os.Stderr, "backlog:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// pipelineYAML is the `pipeline:` section of a -set value (key=value,...).
func pipelineYAML(set string) (string, error) {
	var b strings.Builder
	b.WriteString("pipeline:\n")
	for _, kv := range strings.Split(set, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" || v == "" {
			return "", fmt.Errorf("-set %q: want key=value,...", set)
		}
		fmt.Fprintf(&b, "  %s: %s\n", k, v)
	}
	return b.String(), nil
}

// drained is one binary's drain of the backlog.
type drained struct {
	name           string
	seconds, rssMB float64
}

func run(bin, baseBin string, sets []string, withAvro bool, rounds, events, docs int, pgURL string, maxRSS int) error {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic, avroTopic))
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	for i := 0; i < events; {
		var recs []*kgo.Record
		for ; i < events && len(recs) < 2000; i++ {
			recs = append(recs, backlog.Event(i, docs))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("produced %d events over %d documents in %s\n", events, docs, time.Since(start).Round(time.Millisecond))

	type variant struct{ name, path, extra, topic string }
	bins := []variant{{"new", bin, "", topic}}
	if withAvro {
		reg := srtest.Start(srtest.Options{})
		defer reg.Close()
		a, err := backlog.NewAvro(avroTopic, func(s, typ, text string) int { return reg.Register(s, typ, text) })
		if err != nil {
			return err
		}
		for i := 0; i < events; {
			var recs []*kgo.Record
			for ; i < events && len(recs) < 2000; i++ {
				r, err := a.Event(i, docs)
				if err != nil {
					return err
				}
				r.Topic = avroTopic
				recs = append(recs, r)
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
		}
		bins = append(bins, variant{"new(avro)", bin, "", avroTopic})
		avroRegistry = reg.URL()
	}
	for _, set := range sets {
		extra, _ := pipelineYAML(set)
		bins = append(bins, variant{"new(" + set + ")", bin, extra, topic})
	}
	if baseBin != "" {
		bins = append([]variant{{"base", baseBin, "", topic}}, bins...)
	}
	var runs []drained
	for r := range max(rounds, 1) {
		// Each round starts one variant later, so over as many rounds as
		// variants each drains in every position: a drift of the shared
		// machine falls on all, and no variant always follows another's
		// drain (with three, reversing alone kept one always in the middle).
		k := r % len(bins)
		order := append(slices.Clone(bins[k:]), bins[:k]...)
		for i, b := range order {
			d, err := drain(ctx, c, b.path, b.extra, b.topic, fmt.Sprintf("backlog-%d-%d", i, r), events, docs, pgURL)
			if err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			d.name = b.name
			runs = append(runs, d)
			fmt.Printf("backlog %s: %d events in %.1fs = %.0f events/s, peak RSS %.1f MiB (bound %d MiB)\n",
				b.name, events, d.seconds, float64(events)/d.seconds, d.rssMB, maxRSS)
		}
	}
	med := func(name string, f func(drained) float64) float64 {
		var xs []float64
		for _, d := range runs {
			if d.name == name {
				xs = append(xs, f(d))
			}
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	rss := func(d drained) float64 { return d.rssMB }
	rate := func(d drained) float64 { return float64(events) / d.seconds }
	for _, b := range bins {
		if b.name == "base" {
			continue
		}
		fmt.Printf("backlog: %d events, medians of %d round(s): %s %.0f events/s, peak RSS %.1f MiB (bound %d MiB)\n",
			events, max(rounds, 1), b.name, med(b.name, rate), med(b.name, rss), maxRSS)
		if baseBin != "" {
			fmt.Printf("backlog: base %.0f events/s, peak RSS %.1f MiB; %s ÷ base: peak RSS %.2f (target ≤ 1.5), events/s %.2f\n",
				med("base", rate), med("base", rss), b.name, med(b.name, rss)/med("base", rss), med(b.name, rate)/med("base", rate))
		}
	}
	if withAvro {
		fmt.Printf("backlog: the same changes in Avro through a schema registry ÷ in JSON: events/s %.2f (target ≥ 0.95), peak RSS %.2f\n",
			med("new(avro)", rate)/med("new", rate), med("new(avro)", rss)/med("new", rss))
	}
	for _, d := range runs {
		if d.name != "base" && d.rssMB > float64(maxRSS) {
			return fmt.Errorf("peak RSS %.1f MiB over the bound %d MiB", d.rssMB, maxRSS)
		}
	}
	return nil
}

// drain runs bin's `serve --once` over the whole backlog as consumer group
// group, into an index schema of its own, sampling its peak RSS. extra is
// appended to its configuration (a pipeline: section, or nothing).
func drain(ctx context.Context, c *kfake.Cluster, bin, extra, topic, group string, events, docs int, pgURL string) (drained, error) {
	var res drained
	var b [5]byte
	_, _ = crand.Read(b[:])
	schema := "bench_backlog_" + hex.EncodeToString(b[:])
	defer func() {
		if conn, err := pgx.Connect(ctx, pgURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	}()
	dir, err := os.MkdirTemp("", "backlog")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ragsync.yaml")
	yaml := fmt.Sprintf(`source:
  kind: kafka
  kafka:
    brokers: [%s]
    topics: [%s]
    group: %s
`, strings.Join(c.ListenAddrs(), ","), topic, group) + registryYAML(topic) + child.Settings("public.articles", pgURL, schema, "backlog") + extra
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return res, err
	}
	cmd := orphan.DieWithParent(exec.Command(bin, "serve", "--once", "--config", cfg))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	var peak, samples atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if kb, ok := vmHWM(cmd.Process.Pid); ok {
				peak.Store(max(peak.Load(), kb))
				samples.Add(1)
			} else {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	err = cmd.Wait()
	<-done
	elapsed := time.Since(start)
	if err != nil {
		return res, fmt.Errorf("serve: %w\n%s", err, out.String())
	}
	// Exit 0 means drained; still count what it did, so a summary that
	// disagrees with the events produced fails the bench.
	if n := child.Drained(out.String()); n < events {
		return res, fmt.Errorf("serve stopped after %d of %d events: %s", n, events, strings.TrimSpace(out.String()))
	}
	res.seconds, res.rssMB = elapsed.Seconds(), float64(peak.Load())/1024
	j, _ := json.MarshalIndent(map[string]any{
		"bin": bin, "events": events, "documents": docs, "seconds": res.seconds,
		"events_per_second": float64(events) / res.seconds, "peak_rss_mib": res.rssMB,
		"rss_samples": samples.Load(), "summary": strings.TrimSpace(out.String()),
	}, "", "  ")
	fmt.Println(string(j))
	return res, nil
}

// vmHWM reads the peak resident set size (kB) of pid; false once it is gone.
func vmHWM(pid int) (int64, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil && n > 0 // a zombie reports no memory
		}
	}
	return 0, false
}
