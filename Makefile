# ragsync — make help lists the targets.
GO          ?= go
GOFLAGS     ?= -mod=mod
export GOFLAGS
BIN         := bin/ragsync
# make test takes ≤ 15 minutes on a quiet 2-core machine and ≤ 20 beside
# another run (measured: 11 m 7 s alone, 14 m 22 s and 15 m 51 s for two
# runs side by side); the tests package
# is the longest (its fault, rebalance and slot-kill tests run in parallel).
# The timeout is a hang guard. scripts/test.sh prints each phase and package
# as it goes.
TEST_FLAGS  ?= -race -count=1 -timeout 30m
PKGS        := ./...

.PHONY: bench-fleet bench-read-your-writes bench-avro base-bin bench-freshness-curve compose-config compose-smoke help build test test-short demo bench bench-go bench-frontdoor bench-incremental bench-backlog bench-throughput bench-pgcost lint services clean bench-bulk bench-pgsource bench-pgsource-memory bench-monitor bench-largedoc bench-shadow bench-freshness bench-reusefresh bench-sizing

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build bin/ragsync
	@echo "build: compiling bin/ragsync; the first build compiles every dependency (a minute or more on 2 cores), later ones take seconds"
	$(GO) build -o $(BIN) ./cmd/ragsync

services: ## make sure Postgres (with pgvector, wal_level=logical) and Redis are running
	@bash scripts/services.sh

test: services ## set up services and run every test (with -race), saying what runs and each package's result as it finishes
	@GO="$(GO)" TEST_FLAGS="$(TEST_FLAGS)" PKGS="$(PKGS)" bash scripts/test.sh

test-short: ## run the tests that need no Postgres, Redis or Kafka
	$(GO) test -short $(PKGS)

demo: services build ## offline end-to-end demo: kfake -> ragsync -> pgvector, then three queries
	@echo "demo: compiling the demo driver (examples/demo, with the in-process Kafka cluster); the first time takes about half a minute more"
	$(GO) build -o bin/demo ./examples/demo
	bin/demo --ragsync $(BIN)

bench: services bench-incremental bench-reusefresh bench-frontdoor bench-backlog bench-avro bench-largedoc bench-throughput bench-bulk bench-shadow bench-pgsource bench-pgsource-memory bench-monitor bench-freshness bench-freshness-curve bench-read-your-writes bench-fleet bench-go ## every benchmark: incremental embedding, front door, backlog memory bound, large documents, write throughput, bulk load, dual-write cost, slot vs Kafka, Postgres-source memory, monitor cost, freshness, the max-rate curve, reading one's own writes, freshness with reuse repayment, a fleet sharing one provider budget, per-package Go benchmarks

# Four `serve` replicas in one consumer group (8 partitions, kfake) and a
# `backfill` share one provider budget in Redis against a fake that enforces
# R requests/min (and T tokens/min) per second, as OpenAI may: the accepted
# rate ÷ R, 429s ÷ requests, the index against a fresh load of the final
# state, the live freshness p99 with the backfill ÷ without, and a control
# without the shared budget. About 4 minutes.
BENCH_FLEET_FLAGS ?= -rpm 600 -quantum 1s -window 40s -replicas 4 -partitions 8
bench-fleet: services build ## several replicas + a backfill on one shared provider budget: accepted ÷ R, 429 share, nothing lost or doubled, live p99 with ÷ without backfill, and the no-budget control (BENCH_FLEET_FLAGS)
	$(GO) run ./bench/fleet -bin $(BIN) $(BENCH_FLEET_FLAGS)

# BASE_REV=<git revision> builds that revision's ragsync as bin/ragsync-base
# and makes it BASE_BIN: bench-backlog and bench-throughput then run it
# beside bin/ragsync in the same run and print new ÷ base.
BASE_REV    ?=
BASE_BIN    ?= $(if $(BASE_REV),bin/ragsync-base)
base-bin: ## build BASE_REV's ragsync as bin/ragsync-base (a baseline for bench-backlog and bench-throughput)
	@test -n "$(BASE_REV)" || { echo "base-bin: set BASE_REV=<git revision>"; exit 2; }
	GO="$(GO)" bash scripts/base-bin.sh $(BASE_REV) bin/ragsync-base

bench-go: services ## Go benchmarks of the decoder (JSON and the registry formats), chunker, embedder, sink and CLI (-count 5; compare runs with benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./cdc ./cdc/registry ./bench/internal/backlog ./chunker ./embedder ./sink ./cmd/ragsync

# The second run gives the Go process one core and leaves the other to Redis,
# as a one-CPU container would (GOMAXPROCS follows the CPU limit).
bench-frontdoor: services ## front-door hit/miss vs direct pgvector, p50/p99, Zipf hit ratio
	$(GO) test -run '^$$' -bench 'FrontDoor|DirectPgvector|HitVsDirect|HitAtDirectX5|Zipf' -benchtime 3s ./fallback
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench 'FrontDoorHit$$|HitVsDirect|HitAtDirectX5' -benchtime 3s ./fallback

# edits-C runs in full (~3.5 min on 2 cores); edits-A in full takes ~11 min, so
# by default a hash-chosen 30% of its documents replay, each with its whole
# history. BENCH_INCREMENTAL_A_SAMPLE=1 runs it in full.
BENCH_INCREMENTAL_A_SAMPLE ?= 0.3
bench-largedoc: services ## peak heap applying one large document, sliced+cached vs whole (baseline) vs over max_document_bytes
	$(GO) test -run '^$$' -bench LargeDocument -benchtime 1x -count 3 ./pipeline

bench-incremental: services ## tokens embedded vs W/G/E baselines, recall@5, convergence on ../shared/data edits-C and edits-A
	@rc=0; \
	$(GO) run ./bench/incremental -sets edits-C $(BENCH_INCREMENTAL_FLAGS) || rc=1; \
	$(GO) run ./bench/incremental -sets edits-A -sample $(BENCH_INCREMENTAL_A_SAMPLE) $(BENCH_INCREMENTAL_FLAGS) || rc=1; \
	exit $$rc

bench-reusefresh: services ## freshness p50/p99 of live changes with the background repayment of reuse debt running vs not (p99 ratio ≤ 1.1)
	$(GO) run ./bench/reusefresh

# Drains 200,000 events through `serve --once` (a separate process) from an
# in-process kfake and fails if its peak RSS (VmHWM) exceeds the bound.
BENCH_BACKLOG_FLAGS ?= -events 200000 -max-rss-mb 400
bench-bulk: services ## bulk load (COPY + one HNSW build) vs streaming upserts of the same 100k chunks, and their ratio
	$(GO) run ./bench/bulk $(BENCH_BULK_FLAGS)

# For each vector type (vector, halfvec, bit with re-rank) and dimension:
# bytes per chunk of the chunks table and of the HNSW index, bulk build
# time, online insert rate, query p50/p99 and recall@10 against exact
# search. The vectors are a seeded Gaussian projection of the hashing
# embedder's vectors of ../shared/data's text (synthetic text without it):
# dense like a model's, not a model's. -n 20000 at 768,1536 dims took 6
# minutes on a busy 2-core machine; the default 100,000 takes several times
# that and about 1 GB of memory for the vectors at 1536 dims.
# BENCH_SIZING_FLAGS="-n 20000" for a check.
BENCH_SIZING_FLAGS ?= -n 100000 -dims 768,1536 -types vector,halfvec,bit -queries 200
bench-sizing: services ## per vector type and dimension: table and HNSW bytes/chunk, build s, insert chunks/s, query p50/p99, recall@10 vs exact, each ÷ vector's (BENCH_SIZING_FLAGS)
	$(GO) run ./bench/sizing $(BENCH_SIZING_FLAGS)

bench-shadow: services ## pipeline changes/s into one index vs one index plus a dual-written shadow of another model, and their ratio
	$(GO) run ./bench/shadow $(BENCH_SHADOW_FLAGS)

bench-backlog: services build $(if $(BASE_REV),base-bin) ## peak RSS and events/s draining a 200k-event Kafka backlog; BASE_REV=<rev> (or BASE_BIN) also drains it with that binary and prints new ÷ base
	$(GO) run ./bench/backlog -bin $(BIN) $(if $(BASE_BIN),-base-bin $(BASE_BIN)) $(BENCH_BACKLOG_FLAGS)

# The same 30,000 changes drained from a JSON topic and from an Avro topic
# read through a schema registry (an in-process test registry), alternating
# over 3 rounds; medians and their ratio.
bench-avro: services build ## events/s draining the same backlog written in Avro through a schema registry and in JSON; prints avro ÷ json
	$(GO) run ./bench/backlog -bin $(BIN) -events 30000 -docs 3000 -rounds 3 -avro

# The same changes drained from a replication slot and from kfake, each by
# `serve --once`, alternating runs; medians and their ratio.
BENCH_PGSOURCE_FLAGS ?= -events 20000 -runs 3
bench-pgsource: services build ## events/s from a Postgres slot into the sink vs the same changes through kfake
	$(GO) run ./bench/pgsource -bin $(BIN) $(BENCH_PGSOURCE_FLAGS)

# One transaction of 8000 rows x 64 KiB of distinct text (~525 MB) drained
# from a slot by `serve --once`; fails past 300 MiB peak RSS or if a row is
# missing from the index.
BENCH_PGSOURCE_MEMORY_FLAGS ?= -rows 8000 -row-kib 64 -max-rss-mib 300
bench-pgsource-memory: services build ## peak RSS of serve applying one >= 500 MB transaction from a Postgres slot (bound 300 MiB), every row indexed
	$(GO) run ./bench/pgsourcemem -bin $(BIN) $(BENCH_PGSOURCE_MEMORY_FLAGS)

# Drains the same Kafka backlog with `serve --once` (monitor off) and
# `serve --once --monitor` checking every 5s, 5 runs of each, rotating;
# fails if the child's CPU per event off/on (throughput-equivalent, median of
# the rounds' ratios) is below 0.95 or an "on" run did not check.
# BENCH_MONITOR_FLAGS="-intervals 1s,5s -gate 5s" adds a 1s monitor, reported.
BENCH_MONITOR_FLAGS ?= -events 3000 -docs 600 -rounds 5 -intervals 5s -gate 5s
bench-monitor: services build ## CPU/event and events/s with the monitor on vs off, peak RSS, monitor checks and token spend
	$(GO) run ./bench/monitor -bin $(BIN) $(BENCH_MONITOR_FLAGS)

lint: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Loads 2,000 documents of ~4 KB through `serve --once` against the test
# embedding server at each latency, beside the raw HNSW insert limit of the
# same vectors; BASE_BIN=<an older ragsync binary> runs it alternately for a
# before/after table; BENCH_THROUGHPUT_FLAGS="-docs 20000" for the large load.
BENCH_THROUGHPUT_FLAGS ?= -docs 2000 -latencies 0s,150ms
bench-freshness: services build ## commit-to-searchable p50/p95/p99 and applied rate at fixed change rates through Kafka (kfake) and the Postgres source (a slot of its own; in-process and into ragsync serve), provider latency BENCH_FRESHNESS_FLAGS="-latency 150ms -rates 5,50"
	$(GO) run ./bench/freshness -bin $(BIN) $(BENCH_FRESHNESS_FLAGS)

# Raises the rate through the Kafka leg (in process), 30 s per rate after a
# 3 s warm-up, from 60 changes/s by ×1.5 until one is not sustained, then
# halves the gap between the last rate sustained and that one three times;
# then 80% of the highest steady rate. A rate is sustained when applied ≥
# 0.95 × offered and the queue does not grow: the p50 freshness of the
# changes committed in the last third of the window is ≤ 1.5 × that of the
# first third. First drains a backlog of 20,000 of the same changes (same
# documents, change mix, provider latency and pipeline settings) and prints
# highest steady rate ÷ that drain rate. About 8 minutes on 2 cores.
BENCH_FRESHNESS_CURVE_FLAGS ?= -sources kafka -latency 150ms -duration 30s -curve-from 60 -curve-factor 1.5 -curve-refine 3 -curve-sustain 0.95 -curve-growth 1.5 -curve-drain 20000
bench-freshness-curve: services build ## max-rate curve: per rate applied ÷ offered and the last third's p50 ÷ the first's, the highest steady rate (≥ 0.95 applied, no queue growth), p99 at 80% of it, ÷ a like-for-like backlog drain (BENCH_FRESHNESS_CURVE_FLAGS)
	$(GO) run ./bench/freshness -bin $(BIN) -curve $(BENCH_FRESHNESS_CURVE_FLAGS)

bench-read-your-writes: services build ## 1,000 changes at 50/s through serve on the Postgres source, each waited for at its pg_current_wal_lsn() and searched: share found, latency from commit vs freshness p99 + 50 ms, watermark age p99 vs freshness p99 + 100 ms
	$(GO) run ./bench/freshness -bin $(BIN) -after 1000 -rates 50 -latency 150ms $(BENCH_READ_YOUR_WRITES_FLAGS)

bench-throughput: services build $(if $(BASE_REV),base-bin) ## write path: chunks/s vs raw HNSW inserts, CPU ms/chunk (serve, Postgres), an edit run, a 4 KB vs 64 KB edit sweep
	$(GO) run ./bench/throughput -bin $(BIN) $(if $(BASE_BIN),-base-bin $(BASE_BIN)) $(BENCH_THROUGHPUT_FLAGS)

bench-pgcost: services ## Postgres CPU of each write-path statement, per document, for a load and a 5-character edit
	$(GO) run ./bench/pgcost

# Compose v2 (the docker plugin, `docker compose`) when the docker client
# has it, else v1 (`docker-compose`, Debian's package).
COMPOSE     ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

compose-config: ## validate compose/ (the Kafka stack and its direct, ollama and avro profiles) with docker compose (v2) or docker-compose (v1) config
	@command -v $(firstword $(COMPOSE)) >/dev/null || { echo "compose-config: $(COMPOSE) not found: install Docker's compose plugin (docker compose) or Debian's docker-compose, or run make compose-smoke (as root), which installs it"; exit 1; }
	cd compose && $(COMPOSE) config -q && $(COMPOSE) --profile direct config -q && $(COMPOSE) --profile ollama config -q && $(COMPOSE) --profile avro config -q
	@echo "compose: docker-compose.yml valid for the default, direct, ollama and avro profiles"

# Not part of make test: it needs root, installs docker.io and docker-compose,
# validates compose/ (as compose-config), starts its own dockerd and takes
# minutes (most of it the first image builds, cached in /var/lib/ragsync-smoke
# afterwards). Its run directory is bin/scratch/compose-smoke, removed when it
# passes.
compose-smoke: ## install what it needs, validate compose/, bring the direct profile up for real from locally built images, index a row, query it, tear down
	@SMOKE_RUN_DIR="$(CURDIR)/bin/scratch/compose-smoke" bash scripts/compose-smoke.sh

clean: ## remove build output
	rm -rf bin
