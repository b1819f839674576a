// Command fleet measures several ragsync processes sharing one provider
// key: -replicas `ragsync serve` children in one Kafka consumer group on an
// in-process Kafka (kfake, -partitions partitions), beside one `ragsync
// backfill` child reading a source table of its own, all with provider
// openai against a fake that enforces the key's limits as a provider does
// (internal/openaitest Limits: -rpm requests and -tpm tokens per minute
// over -quantum), and all with embedder.budget.redis_url on -redis under a
// key prefix of their own, so they share one budget.
//
// The run, in order:
//
//  1. live only: Debezium changes at -live-rate (default: half the
//     budget, each change being one chunk, so at most one request and its
//     tokens) for -window after -warm; serve's
//     ragsync_pipeline_freshness_seconds, summed over the replicas, gives
//     the live freshness p99 (source commit → chunk rows with vectors
//     committed);
//  2. live + backfill: the same live rate with the backfill running beside
//     it (sized to outlast the window), for -window after -warm: the
//     fleet's accepted rate ÷ R (and tokens ÷ T with -tpm), 429s ÷
//     requests, and the live freshness p99 again, ÷ that of 1;
//  3. drain: the live changes stop, the backfill finishes, the replicas
//     apply everything; then a fresh load of the final state (`serve
//     --once` over the whole topic and the backfill, one process, into a
//     schema of its own, against an unlimited fake) is compared with the
//     fleet's index row by row: documents and their versions, chunks and
//     their hashes and vectors, and doubled chunks;
//  4. control (-control, on by default): the same replicas and backfill
//     without embedder.budget (each process enforcing the full -rpm and
//     -tpm alone) over the topic's backlog, for -window after -warm: the
//     429 storm the shared budget replaces.
//
// Each run has its own consumer group, index schema (dropped after) and
// Redis prefix (deleted after). It prints a markdown table.
//
//	go run ./bench/fleet -bin bin/ragsync [-rpm 600] [-tpm 0] [-quantum 1s] [-window 40s] [-replicas 4] [-partitions 8]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/chunker"
)

type options struct {
	bin, pgURL, redisURL string
	rpm, tpm             int
	quantum              time.Duration
	window, warm         time.Duration
	replicas, partitions int
	liveRate             float64
	liveDocs             int
	batch                int
	backfillRows         int
	dims                 int
	latency              time.Duration
	control              bool
	drainTimeout         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/ragsync", "ragsync binary (make build)")
	flag.StringVar(&o.pgURL, "pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL: the index schemas and the backfill's source table")
	flag.StringVar(&o.redisURL, "redis", envOr("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL of the shared budget (a key prefix of the run's own)")
	flag.IntVar(&o.rpm, "rpm", 600, "R: the key's requests per minute, enforced by the fake and configured as embedder.requests_per_minute")
	flag.IntVar(&o.tpm, "tpm", 0, "T: the key's tokens per minute (0: no token limit), likewise")
	flag.DurationVar(&o.quantum, "quantum", time.Second, "period over which the fake enforces the limits (a bucket holds quantum × rate; OpenAI may enforce a minute's limit per second)")
	flag.DurationVar(&o.window, "window", 40*time.Second, "each measured window (live only; live + backfill; control)")
	flag.DurationVar(&o.warm, "warm", 10*time.Second, "settling time before each window")
	flag.IntVar(&o.replicas, "replicas", 4, "serve replicas in the consumer group")
	flag.IntVar(&o.partitions, "partitions", 8, "partitions of the topic")
	flag.Float64Var(&o.liveRate, "live-rate", 0, "live changes per second (0: half the budget, each change one request of one chunk at most)")
	flag.IntVar(&o.liveDocs, "live-docs", 2000, "distinct live documents the changes cycle over")
	flag.IntVar(&o.batch, "batch", 16, "embedder.max_batch_inputs")
	flag.IntVar(&o.backfillRows, "backfill-rows", 0, "rows the backfill reads (0: enough to outlast the live + backfill window)")
	flag.IntVar(&o.dims, "dims", 64, "embedding dimensions")
	flag.DurationVar(&o.latency, "latency", 150*time.Millisecond, "the fake provider's latency per request (as bench/freshness; 0: freshness is CPU and Postgres only)")
	flag.BoolVar(&o.control, "control", true, "also run the control: no shared budget, each process with the full limits")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 3*time.Minute, "how long the drain may take before the run fails")
	flag.Parse()
	// Every change and row is one chunk of about this many tokens.
	perChunk := float64(chunker.CountTokens("# Backlog 1000\n\n" + backlog.Para(1)))
	if o.liveRate == 0 {
		// Half the budget: one request a change, and its tokens.
		o.liveRate = float64(o.rpm) / 120
		if o.tpm > 0 {
			o.liveRate = min(o.liveRate, float64(o.tpm)/120/perChunk)
		}
	}
	if o.backfillRows == 0 {
		// The other half of the budget for the warm-up and the window, in
		// full batches, and a third more so that it is still running at
		// the window's end.
		secs := (o.warm + o.window).Seconds() * 4 / 3
		rows := float64(o.rpm) / 2 / 60 * secs * float64(o.batch)
		if o.tpm > 0 {
			rows = min(rows, float64(o.tpm)/2/60*secs/perChunk)
		}
		o.backfillRows = int(rows)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func warnf(format string, args ...any) { fmt.Fprintf(os.Stderr, "fleet: "+format+"\n", args...) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s fleet: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
