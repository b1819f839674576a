// Command incremental measures what ragsync pays to keep an index in sync
// with a real edit history: it replays the edits-C
// and edits-A histories as Debezium PostgreSQL change events through the
// real pipeline (decoder, chunker, OpenAI-compatible embedder against an
// in-process test server that counts tokens, pgvector sink), and compares
// the tokens embedded with three baselines computed on the same history:
// whole-document re-embedding (W), greedy chunks with a per-chunk hash (G)
// and the edit floor (E, paragraphs new in each version). It also measures
// self-retrieval recall@5 for ragsync's index and a greedy one, and checks
// that the replayed index equals a fresh load of the final state.
//
//	go run ./bench/incremental [-sets edits-C,edits-A] [-limit N]
//
// Every schema it creates (bench_incr_<random>…) is dropped at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ragsync/ragsync/chunker"
)

func main() {
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-incremental:", err)
		os.Exit(1)
	}
	var cfg config
	flag.StringVar(&cfg.DataDir, "data", filepath.Join(root, "..", "shared", "data"), "directory holding edits-C/ and edits-A/")
	sets := flag.String("sets", "edits-C,edits-A", "comma-separated data sets to replay")
	flag.IntVar(&cfg.Limit, "limit", 0, "replay at most this many events of each set (0: all); the first events are the initial load")
	flag.Float64Var(&cfg.Sample, "sample", 1, "replay only this share (0..1] of the documents, picked by a hash of their id, each with its whole history")
	flag.StringVar(&cfg.OutDir, "out", filepath.Join(root, "bench", "incremental"), "directory for results-<set>.json")
	flag.StringVar(&cfg.PostgresURL, "postgres-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres with pgvector; schemas bench_incr_* are created and dropped there")
	flag.IntVar(&cfg.TargetTokens, "target-tokens", 470, "chunker target_tokens for ragsync and for the greedy baseline (~350 words)")
	flag.IntVar(&cfg.RagsyncTarget, "ragsync-target-tokens", 0, "ragsync's chunker target_tokens when it is to differ from G's (0: -target-tokens); G stays greedy at -target-tokens")
	flag.IntVar(&cfg.RagsyncMin, "ragsync-min-tokens", 0, "ragsync's chunker min_tokens (0: the chunker's default)")
	flag.IntVar(&cfg.RagsyncMax, "ragsync-max-tokens", 0, "ragsync's chunker max_tokens (0: the chunker's default)")
	flag.IntVar(&cfg.RagsyncRefine, "ragsync-refine-target-tokens", 0, "ragsync's chunker refine_target_tokens: the size an update cuts the chunks it changes into (0: the chunker's default, -1: off)")
	flag.IntVar(&cfg.Dimensions, "dimensions", 256, "embedding dimensions asked of the test server")
	flag.StringVar(&cfg.Model, "model", "text-embedding-3-small", "embedding model name sent to the test server")
	flag.StringVar(&cfg.VectorsURL, "vectors-url", "", "an OpenAI-compatible base URL (…/v1) whose model computes the vectors the test server serves, so recall is a real model's (-dimensions must be its size; spend is still counted in cl100k_base tokens); empty: hashing vectors, which compare chunkings, not a model")
	flag.IntVar(&cfg.Queries, "queries", 200, "self-retrieval queries (sentences sampled from the final documents)")
	flag.Uint64Var(&cfg.Seed, "seed", 3, "seed of the sentence sample")
	flag.IntVar(&cfg.Workers, "workers", 4, "pipeline workers")
	flag.BoolVar(&cfg.Verbose, "v", false, "log pipeline warnings and progress")
	flag.BoolVar(&cfg.NoReuse, "no-reuse", false, "turn near-duplicate reuse off (the baseline of recall and spend)")
	flag.BoolVar(&cfg.Repay, "repay", true, "repay reuse debt within -repay-window of source time, as serve does")
	flag.DurationVar(&cfg.RepayWindow, "repay-window", 5*time.Minute, "reuse.repay_window, in the events' own time")
	flag.StringVar(&cfg.NewWords, "new-words", "", "reuse.new_words: embed or repay_first (empty: the default)")
	flag.BoolVar(&cfg.Breakdown, "breakdown", false, "only say where the update tokens go, per chunker, with exact hashing (no Postgres, no embedding)")
	flag.StringVar(&cfg.BreakdownArms, "breakdown-arms", "", "more chunkers for -breakdown, comma-separated strategy:target:min:max (0: the default)")
	flag.IntVar(&cfg.CheckEvery, "check-every", 25, "a fidelity check (64 uniform vectors) every this many segments of the replay")
	flag.Parse()

	if _, err := os.Stat(cfg.DataDir); errors.Is(err, os.ErrNotExist) {
		fmt.Println("skipped: ../shared/data not found")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	failed := false
	for _, set := range strings.Split(*sets, ",") {
		set = strings.TrimSpace(set)
		if set == "" {
			continue
		}
		if cfg.Breakdown {
			arms, err := breakdownArms(cfg, cfg.BreakdownArms)
			if err == nil {
				err = breakdown(os.Stdout, cfg, set, arms)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench-incremental %s: %v\n", set, err)
				failed = true
			}
			continue
		}
		res, err := runSet(ctx, cfg, set)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-incremental %s: %v\n", set, err)
			failed = true
			if ctx.Err() != nil {
				break // interrupted: the schemas are dropped, stop here
			}
			continue
		}
		res.print(os.Stdout)
		path := filepath.Join(cfg.OutDir, "results-"+set+".json")
		if err := res.writeJSON(path); err != nil {
			fmt.Fprintf(os.Stderr, "bench-incremental %s: %v\n", set, err)
			failed = true
		} else {
			fmt.Printf("wrote %s\n\n", path)
		}
		if !res.Convergence.Pass {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// config is what one invocation measures.
type config struct {
	DataDir      string
	Limit        int
	Sample       float64
	OutDir       string
	PostgresURL  string
	TargetTokens int
	// RagsyncTarget, RagsyncMin and RagsyncMax size ragsync's chunker
	// apart from the greedy baseline's (see ragsyncChunker).
	RagsyncTarget, RagsyncMin, RagsyncMax int
	Dimensions                            int
	Model                                 string
	// VectorsURL, when set, is an OpenAI-compatible embeddings endpoint
	// whose vectors the counting server serves instead of hashing ones.
	VectorsURL    string
	Queries       int
	Seed          uint64
	Workers       int
	Verbose       bool
	NoReuse       bool
	Repay         bool
	RepayWindow   time.Duration
	NewWords      string
	CheckEvery    int
	Breakdown     bool
	BreakdownArms string

	// RagsyncRefine is ragsync's chunker's RefineTargetTokens.
	RagsyncRefine int
}

// repoRoot walks up from the working directory to the directory whose
// go.mod declares ragsync's module, so the defaults work from any
// subdirectory (go run sets the working directory to the caller's).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/ragsync/ragsync\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no ragsync go.mod above %s: run from the repository", dir)
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ragsyncChunker is the configuration of ragsync's chunker in a run: the
// content-defined strategy at -target-tokens, refining what updates change
// at the default size, unless the -ragsync-* flags size it apart from G,
// which is always greedy at -target-tokens and never refines.
func (c config) ragsyncChunker() chunker.Config {
	t := c.TargetTokens
	if c.RagsyncTarget > 0 {
		t = c.RagsyncTarget
	}
	return chunker.Config{TargetTokens: t, MinTokens: c.RagsyncMin, MaxTokens: c.RagsyncMax, RefineTargetTokens: c.RagsyncRefine}.WithDefaults()
}
