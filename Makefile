# ragsync — make help lists the targets.
GO          ?= go
GOFLAGS     ?= -mod=mod
export GOFLAGS
BIN         := bin/ragsync
# The whole suite runs ~11 min on a quiet 2-core machine (the tests
# package ~6.5 min: its long fault, rebalance and slot-kill tests run in
# parallel); the timeout is a hang guard with room for a busier one.
TEST_FLAGS  ?= -race -count=1 -timeout 30m
PKGS        := ./...

.PHONY: help build test test-short demo bench bench-go bench-frontdoor bench-incremental bench-backlog bench-throughput lint services clean bench-bulk bench-pgsource bench-monitor bench-largedoc bench-shadow bench-freshness

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build bin/ragsync
	$(GO) build -o $(BIN) ./cmd/ragsync

services: ## make sure Postgres (with pgvector, wal_level=logical) and Redis are running
	@bash scripts/services.sh

test: services ## set up services and run every test (with -race)
	$(GO) build -race -o bin/ragsync-race ./cmd/ragsync
	E2E_RAGSYNC_BIN=$(CURDIR)/bin/ragsync-race $(GO) test $(TEST_FLAGS) $(PKGS)

test-short: ## run the tests that need no Postgres, Redis or Kafka
	$(GO) test -short $(PKGS)

demo: services build ## offline end-to-end demo: kfake -> ragsync -> pgvector, then three queries
	$(GO) run ./examples/demo --ragsync $(BIN)

bench: services bench-incremental bench-frontdoor bench-backlog bench-largedoc bench-throughput bench-bulk bench-shadow bench-pgsource bench-monitor bench-freshness bench-go ## every benchmark: incremental embedding, front door, backlog memory bound, large documents, write throughput, bulk load, dual-write cost, slot vs Kafka, monitor cost, per-package Go benchmarks

bench-go: services ## Go benchmarks of the decoder, chunker, embedder, sink and CLI (-count 5; compare runs with benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./cdc ./chunker ./embedder ./sink ./cmd/ragsync

# The second run gives the Go process one core and leaves the other to Redis,
# as a one-CPU container would (GOMAXPROCS follows the CPU limit).
bench-frontdoor: services ## issue 5: front-door hit/miss vs direct pgvector, p50/p99, Zipf hit ratio
	$(GO) test -run '^$$' -bench 'FrontDoor|DirectPgvector|HitVsDirect|HitAtDirectX5|Zipf' -benchtime 3s ./fallback
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench 'FrontDoorHit$$|HitVsDirect|HitAtDirectX5' -benchtime 3s ./fallback

# edits-C runs in full (~3.5 min on 2 cores); edits-A in full takes ~11 min, so
# by default a hash-chosen 30% of its documents replay, each with its whole
# history. BENCH_INCREMENTAL_A_SAMPLE=1 runs it in full.
BENCH_INCREMENTAL_A_SAMPLE ?= 0.3
bench-largedoc: services ## issue 10: peak heap applying one large document, sliced+cached vs whole (baseline) vs over max_document_bytes
	$(GO) test -run '^$$' -bench LargeDocument -benchtime 1x -count 3 ./pipeline

bench-incremental: services ## issue 3: tokens embedded vs W/G/E baselines, recall@5, convergence on ../shared/data edits-C and edits-A
	@rc=0; \
	$(GO) run ./bench/incremental -sets edits-C $(BENCH_INCREMENTAL_FLAGS) || rc=1; \
	$(GO) run ./bench/incremental -sets edits-A -sample $(BENCH_INCREMENTAL_A_SAMPLE) $(BENCH_INCREMENTAL_FLAGS) || rc=1; \
	exit $$rc

# Drains 200,000 events through `serve --once` (a separate process) from an
# in-process kfake and fails if its peak RSS (VmHWM) exceeds the bound.
BENCH_BACKLOG_FLAGS ?= -events 200000 -max-rss-mb 400
bench-bulk: services ## issue 12: bulk load (COPY + one HNSW build) vs streaming upserts of the same 100k chunks, and their ratio
	$(GO) run ./bench/bulk $(BENCH_BULK_FLAGS)

bench-shadow: services ## issue 12: pipeline changes/s into one index vs one index plus a dual-written shadow of another model, and their ratio
	$(GO) run ./bench/shadow $(BENCH_SHADOW_FLAGS)

bench-backlog: services build ## issue 4: peak RSS and events/s draining a 200k-event Kafka backlog
	$(GO) run ./bench/backlog -bin $(BIN) $(BENCH_BACKLOG_FLAGS)

# The same changes drained from a replication slot and from kfake, each by
# `serve --once`, alternating runs; medians and their ratio.
BENCH_PGSOURCE_FLAGS ?= -events 20000 -runs 3
bench-pgsource: services build ## issue 13: events/s from a Postgres slot into the sink vs the same changes through kfake
	$(GO) run ./bench/pgsource -bin $(BIN) $(BENCH_PGSOURCE_FLAGS)

# Drains the same Kafka backlog with `serve --once` (monitor off) and
# `serve --once --monitor` checking every 5s, 5 runs of each, rotating;
# fails if the child's CPU per event off/on (throughput-equivalent, median of
# the rounds' ratios) is below 0.95 or an "on" run did not check.
# BENCH_MONITOR_FLAGS="-intervals 1s,5s -gate 5s" adds a 1s monitor, reported.
BENCH_MONITOR_FLAGS ?= -events 3000 -docs 600 -rounds 5 -intervals 5s -gate 5s
bench-monitor: services build ## issue 14: CPU/event and events/s with the monitor on vs off, peak RSS, monitor checks and token spend
	$(GO) run ./bench/monitor -bin $(BIN) $(BENCH_MONITOR_FLAGS)

lint: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Loads 2,000 documents of ~4 KB through `serve --once` against the test
# embedding server at each latency, beside the raw HNSW insert limit of the
# same vectors; BASE_BIN=<an older ragsync binary> runs it alternately for a
# before/after table; BENCH_THROUGHPUT_FLAGS="-docs 20000" for the large load.
BENCH_THROUGHPUT_FLAGS ?= -docs 2000 -latencies 0s,150ms
bench-freshness: services ## commit-to-searchable p50/p95/p99 and applied rate at fixed change rates through Kafka (kfake), provider latency BENCH_FRESHNESS_FLAGS="-latency 150ms -rates 5,50"
	$(GO) run ./bench/freshness $(BENCH_FRESHNESS_FLAGS)

bench-throughput: services build ## issue 15: chunks/s vs raw HNSW inserts, CPU ms/chunk, requests/input, round trips/doc
	$(GO) run ./bench/throughput -bin $(BIN) $(if $(BASE_BIN),-base-bin $(BASE_BIN)) $(BENCH_THROUGHPUT_FLAGS)

clean: ## remove build output
	rm -rf bin
