// Command throughput is the write-path benchmark users read: it
// loads N documents of ~4 KB through `ragsync serve --once` (file source)
// against the in-process OpenAI-compatible test server with a configurable
// reply latency, and measures in the same run the raw limit: parallel
// batched INSERTs (-raw-batch rows each; 1: single-row) of the same vectors
// into a bare table with the same HNSW index, from the same number of
// connections. With -base-bin it runs
// a second binary (e.g. main's) in alternation, for a before/after table.
//
//	go run ./bench/throughput -bin bin/ragsync [-base-bin /tmp/ragsync-main] [-docs 2000] [-latencies 0s,150ms]
//
// Per run it prints chunks/s, the ratio to the raw limit, the child's CPU
// ms per chunk (getrusage), Postgres backends' CPU ms per chunk (from
// /proc of the run's client backends, sampled), embedding requests per
// input, and Postgres round trips and transactions per document: round
// trips are client→server bursts counted by a TCP relay in front of
// Postgres, transactions are pg_stat_database.xact_commit of a database
// created for the run. With -costs it also prices, per chunk, what the
// chunks table writes beyond the HNSW index.
//
// Postgres CPU is read two ways: the run's client backends, and every
// Postgres process that worked for it (adding the database's autovacuum
// and parallel workers and the cluster's WAL writer, checkpointer and
// background writer). With -edit (the default) each load at the first
// latency is followed by a run that changes 5 characters in every
// document (-edit-chars; 0 leaves the text as it was), reported as process
// and Postgres CPU per document and as a share of the load's. Every edit
// also changes a column the text does not render (status), which -bin's
// config declares as a metadata field (-fields-new): with -edit-chars 0
// the edit is a metadata-only update. A document took its edit when its
// stored commit time is the edit's; with the field, its metadata must also
// carry the edit's status. -edit-sizes repeats load + edit at other document
// sizes (4 KB and 64 KB by default) to show the edit's CPU grows at most
// linearly with the document.
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

type options struct {
	bin, baseBin string
	docs         int
	docBytes     int
	latencies    []time.Duration
	dims         int
	conns        int
	rawBatch     int
	rounds       int
	adminURL     string
	costs        bool
	costDocs     int
	costRounds   int
	load         bool
	fullTextNew  bool
	fieldsNew    bool
	base64New    bool
	cpuProfile   string
	poolConns    int
	pgParams     string
	dropNew      string
	edit         bool
	editChars    int
	editSizes    []int
}

// measureRaw runs and prints the raw limit.
func measureRaw(ctx context.Context, o options, c *corpus) (timing, error) {
	raw, err := rawLimit(ctx, o, c)
	if err != nil {
		return raw, fmt.Errorf("raw limit: %w", err)
	}
	fmt.Printf("raw limit: %d rows in %s over %d connections, %d rows per INSERT = %.0f rows/s, PG CPU %.3f ms/row (client backends), %.3f ms/row (every Postgres process) (bare table, same HNSW index)\n",
		raw.rows, raw.elapsed.Round(time.Millisecond), o.conns, max(o.rawBatch, 1), raw.rate(), raw.perRowMs(raw.pgCPU), raw.perRowMs(raw.pgAll))
	return raw, nil
}

func main() {
	var o options
	var lat string
	flag.StringVar(&o.bin, "bin", "bin/ragsync", "ragsync binary under test")
	flag.StringVar(&o.baseBin, "base-bin", "", "baseline ragsync binary, run alternately with -bin (optional)")
	flag.IntVar(&o.docs, "docs", 2000, "documents to load (the issue's larger load is -docs 20000)")
	flag.IntVar(&o.docBytes, "doc-bytes", 4096, "approximate size of each document's text")
	flag.StringVar(&lat, "latencies", "0s,150ms", "embedding server reply latencies, comma-separated")
	flag.IntVar(&o.dims, "dims", 384, "embedding dimensions")
	flag.IntVar(&o.conns, "conns", 2, "connections of the raw-limit INSERT run")
	flag.IntVar(&o.rawBatch, "raw-batch", 100, "rows per INSERT (and transaction) of the raw-limit run; 1: single-row INSERTs")
	flag.IntVar(&o.rounds, "rounds", 1, "alternating rounds per latency")
	flag.StringVar(&o.adminURL, "pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL of a database to connect to for creating the per-run databases")
	flag.BoolVar(&o.costs, "costs", true, "also price the tsvector/GIN column, the cache row and the JSON row per chunk")
	flag.IntVar(&o.costDocs, "cost-docs", 500, "documents of each -costs variant")
	flag.IntVar(&o.costRounds, "cost-rounds", 3, "rounds of the -costs variants, alternated; medians are reported")
	flag.BoolVar(&o.load, "load", true, "run the loads through serve (false: raw limit and -costs only)")
	flag.BoolVar(&o.base64New, "base64-new", false, "set embedder.encoding_format: base64 for -bin (older binaries lack the setting)")
	flag.BoolVar(&o.fullTextNew, "full-text-new", false, "set postgres.full_text: true for -bin (it defaults to off without a front door; older binaries lack the setting)")
	flag.BoolVar(&o.fieldsNew, "fields-new", true, "declare tables[].fields semantic_tag: \"{{status}}\" for -bin, so that every edit (which also changes the unrendered status column) carries a metadata change; -base-bin never gets it (older binaries lack the setting; set false when -bin is one)")
	flag.StringVar(&o.cpuProfile, "cpu-profile", "", "write -bin's CPU profiles to PREFIX-<latency>.pprof and PREFIX-<latency>-edit.pprof, and the edit sweep's to PREFIX-<size>B-<latency>[-edit].pprof (serve --cpu-profile; the last round's)")
	flag.IntVar(&o.poolConns, "pool-conns", 0, "pool_max_conns of serve's Postgres URL (0: pgx's default, max(4, CPUs))")
	flag.StringVar(&o.pgParams, "pg-params-new", "", "k=v,… added to -bin's Postgres URL (runtime parameters such as plan_cache_mode=force_generic_plan)")
	flag.StringVar(&o.dropNew, "drop-new", "", "indexes of schema ragsync to drop after -bin's migrations (price them: -base-bin the same binary)")
	flag.BoolVar(&o.edit, "edit", true, "after each load at the first latency, apply an update of every document that changes -edit-chars characters, and report its CPU")
	flag.IntVar(&o.editChars, "edit-chars", 5, "characters the edit run changes in the middle of each document (0: none, a new version of the row with the same text, the floor of any update)")
	var sizes string
	flag.StringVar(&sizes, "edit-sizes", "4096,65536", "document sizes of the edit sweep (load + edit at the first latency, the same total bytes as the main load); empty: no sweep")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintln(os.Stderr, "throughput: -edit-sizes: want byte counts, e.g. 4096,65536")
			os.Exit(2)
		}
		o.editSizes = append(o.editSizes, n)
	}
	for _, s := range strings.Split(lat, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "throughput: -latencies:", err)
			os.Exit(2)
		}
		o.latencies = append(o.latencies, d)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func randomSuffix() string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "throughput")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	corpus := newCorpus(o.docs, o.docBytes)
	events, err := corpus.writeEvents(dir)
	if err != nil {
		return err
	}
	var edits string
	if o.edit {
		if edits, err = corpus.writeEdits(dir, o.editChars); err != nil {
			return err
		}
	}
	fmt.Printf("corpus: %d documents, %.1f KB each on average\n", o.docs, float64(corpus.bytes)/float64(o.docs)/1024)

	// The raw limit is measured again before every round, so that each
	// load is compared with Postgres as it was at that moment on a shared
	// machine.
	raw, err := measureRaw(ctx, o, corpus)
	if err != nil {
		return err
	}
	if o.costs {
		if err := writeCosts(ctx, o, newCorpus(min(o.costDocs, o.docs), o.docBytes)); err != nil {
			return fmt.Errorf("costs: %w", err)
		}
	}
	if !o.load {
		return nil
	}

	bins := []struct{ name, path string }{{"new", o.bin}}
	if o.baseBin != "" {
		bins = append([]struct{ name, path string }{{"base", o.baseBin}}, bins...)
	}
	// Rounds are the outer loop, so that each round measures every
	// latency and binary close together in time: a shared machine whose
	// load drifts then shifts whole rounds, not one latency's runs.
	var results []result
	for r := 0; r < o.rounds; r++ {
		for _, lat := range o.latencies {
			if len(results) > 0 {
				if raw, err = measureRaw(ctx, o, corpus); err != nil {
					return err
				}
			}
			for _, b := range abba(bins, r) {
				ed := ""
				if lat == o.latencies[0] {
					ed = edits
				}
				res, err := loadOnce(ctx, o, b.path, corpus, events, ed, lat)
				if err != nil {
					return fmt.Errorf("%s at %s: %w", b.name, lat, err)
				}
				res.name, res.latency, res.raw, res.docBytes = b.name, lat, raw, o.docBytes
				results = append(results, res)
				fmt.Println(res.line())
			}
		}
	}
	fmt.Println()
	fmt.Println("| binary | latency | docs | chunks | wall s | chunks/s | ÷ raw | CPU ms/chunk | PG CPU ms/chunk (backends) | PG CPU ms/chunk (all) | PG all ÷ raw's | requests/input | round trips/doc | tx/doc |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Println(r.row())
	}
	fmt.Println()
	summarise(results, o.latencies)
	if o.edit {
		printEdits(results, o.editChars)
	}
	if len(o.editSizes) > 0 {
		return sweep(ctx, o, dir, bins)
	}
	return nil
}

// sweep loads and edits documents of each of o.editSizes, the same total
// bytes as the main load, with every binary in alternation, to show how
// the edit's CPU grows with the document: linearly at most.
func sweep(ctx context.Context, o options, dir string, bins []struct{ name, path string }) error {
	var results []result
	for r := 0; r < o.rounds; r++ {
		for _, size := range o.editSizes {
			docs := max(50, o.docs*o.docBytes/size)
			c := newCorpus(docs, size)
			sub, err := os.MkdirTemp(dir, "sweep")
			if err != nil {
				return err
			}
			events, err := c.writeEvents(sub)
			if err != nil {
				return err
			}
			edits, err := c.writeEdits(sub, o.editChars)
			if err != nil {
				return err
			}
			so := o
			if o.cpuProfile != "" {
				// One profile per size: PREFIX-<size>B-<latency>[-edit].pprof.
				so.cpuProfile = fmt.Sprintf("%s-%dB", o.cpuProfile, size)
			}
			for _, b := range abba(bins, r) {
				res, err := loadOnce(ctx, so, b.path, c, events, edits, o.latencies[0])
				if err != nil {
					return fmt.Errorf("sweep %s at %d bytes: %w", b.name, size, err)
				}
				res.name, res.latency, res.docBytes = b.name, o.latencies[0], size
				results = append(results, res)
				fmt.Printf("sweep %s %d B: %s\n", b.name, size, res.editLine())
			}
		}
	}
	printSweep(results, o.editSizes)
	return nil
}

// abba returns the binaries in order on even rounds and reversed on odd
// ones, so that a load that drifts on a shared machine (other work starting
// or stopping) does not always fall on the same binary.
func abba[T any](bins []T, round int) []T {
	if round%2 == 0 {
		return bins
	}
	out := slices.Clone(bins)
	slices.Reverse(out)
	return out
}
