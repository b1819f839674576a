package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

func newQueryCmd(g *globals) *cobra.Command {
	var (
		k       int
		filters []string
		tenant  string
		all     bool
		table   string
		asJSON  bool
		via     string
		timeout time.Duration
		after   string
		wait    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "query TEXT",
		Short: "Search the index: embed TEXT and print the nearest chunks",
		Long: `query embeds TEXT with the configured embedder, searches the pgvector index
and prints the ranked chunks with their document id, score (cosine similarity)
and text. Deleted documents never appear. With --json, a hit whose vector is
reused from a near-duplicate text and not yet repaid carries
"vector_reused": true (serve repays it within reuse.repay_window).

With --json, each hit carries its chunk's "provenance": the index's model
and dimensions, the model_version the embedding provider reported for its
vector, the chunker settings that cut it, and the change that wrote it
(source, source_position, committed_at, trace_id). A null value is unknown:
the chunk was written before ragsync recorded provenance, which cannot be
proven afterwards. model and dimensions are always known.

On an index that holds documents of tenants (tables[].tenant), a query
must name one with --tenant, or ask for every tenant's documents on
purpose with --all-tenants; without either it is refused, so that no
answer mixes tenants by accident.

Read your own writes: with --after POSITION|TIME, query first waits until
the index's watermark passes the given position of the source (every change
at or before it is searchable), then searches. POSITION is what the source
calls the place of the change the application just wrote:

  - Postgres (source.kind: postgres): SELECT pg_current_wal_lsn() run right
    after the transaction's COMMIT, e.g. 16/B374D848;
  - Kafka: the record's topic/partition/offset, e.g. dbserver1.public.articles/0/42
    (several, comma-separated, for changes on several partitions), or the
    change's commit time as RFC 3339, e.g. 2026-12-07T10:04:05.123Z (every
    change committed at or before it; a change Debezium has not written to
    the topic yet is unknown to ragsync, and clocks must agree);
  - a file source: the change's line number;
  - Redis Streams: stream/ms-seq, the entry id XADD returned, e.g.
    dbserver1.public.articles/1700000000000-0.

When the watermark does not pass within --after-timeout, query prints no
hits and fails with a message starting "not yet:" that says where the
watermark is, exit code 6; with --json it also prints one line
{"status":"not_yet","after":...,"waited_seconds":...,"why":...} on
stdout. Exit 6 means the index may not hold the change yet, not that the
change is missing: ask again later. Without --after, query searches at once.`,
		Example: `  ragsync query --config ragsync.yaml "how do I reset my router" -k 5
  ragsync query --config ragsync.yaml "refund policy" --tenant acme --filter lang=en --json
  ragsync query --config ragsync.yaml "refund policy" --after 16/B374D848 --after-timeout 5s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(args[0]) == "" {
				return errors.New("query: the query text is empty")
			}
			if all && tenant != "" {
				return errors.New("--all-tenants and --tenant: give one or the other")
			}
			if k < 1 || k > 1000 {
				return fmt.Errorf("-k: %d is out of range, use 1..1000", k)
			}
			md := map[string]any{}
			for _, f := range filters {
				key, val, ok := strings.Cut(f, "=")
				if !ok || key == "" {
					return fmt.Errorf("--filter %q: want key=value, e.g. --filter lang=en", f)
				}
				md[key] = val
			}
			var aft *cdc.After
			if after != "" {
				a, err := cdc.ParseAfter(after)
				if err != nil {
					return fmt.Errorf("--%w", err) // "--after: …": cdc names the setting "after"
				}
				aft = &a
			}
			if wait < 0 {
				return fmt.Errorf("--after-timeout: %s is negative; give how long to wait, e.g. 10s (0 checks once)", wait)
			}
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			switch via {
			case "redis":
				if all {
					return errors.New("--all-tenants: the front door always answers for one tenant on an index with tenants; query without --via redis")
				}
				// The front door waits for the watermark itself (at most
				// --after-timeout) and answers not_yet; the client waits a
				// little longer than that for the answer.
				q := fallback.Query{Text: args[0], K: k, Tenant: tenant, Filter: md, After: after}
				if aft != nil {
					q.AfterTimeout = max(wait, time.Millisecond)
					timeout = max(timeout, wait+2*time.Second)
				}
				return queryViaRedis(cmd, cfg, q, table, timeout, asJSON)
			case "", "postgres":
			default:
				return fmt.Errorf("--via %q: use postgres (direct) or redis (through the front door)", via)
			}
			logger := newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false)
			if aft != nil {
				if err := waitAfter(cmd, cfg, *aft, wait, asJSON, logger); err != nil {
					return err
				}
			}
			hits, err := service.Search(ctx, cfg.indexConfig(), args[0], sink.Query{K: k, Tenant: tenant, AllTenants: all, Filter: md, Table: table}, logger)
			if errors.Is(err, sink.ErrTenantRequired) {
				return errors.New("query: this index holds documents of tenants: pass --tenant NAME, or --all-tenants to search every tenant's documents")
			}
			if err != nil {
				return err
			}
			return printHits(cmd, hits, asJSON)
		},
	}
	cmd.Flags().IntVarP(&k, "k", "k", 10, "number of chunks to return")
	cmd.Flags().StringArrayVar(&filters, "filter", nil, "metadata filter key=value (repeatable; all must match)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only documents of this tenant (required on an index with tenants, unless --all-tenants)")
	cmd.Flags().BoolVar(&all, "all-tenants", false, "on an index with tenants, search every tenant's documents")
	cmd.Flags().StringVar(&table, "table", "", "only documents of this source table, e.g. public.articles")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the hits as JSON lines")
	cmd.Flags().StringVar(&via, "via", "postgres", "postgres: search pgvector directly; redis: ask the front door over its Redis Stream protocol")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "with --via redis: how long to wait for the reply")
	cmd.Flags().StringVar(&after, "after", "", "search only once the index holds every change at or before this source position or commit time (an LSN, topic/partition/offset, stream/ms-seq, a line, or an RFC 3339 time)")
	cmd.Flags().DurationVar(&wait, "after-timeout", 10*time.Second, "with --after: how long to wait for the index to pass it before failing with \"not yet\" (exit 6); 0 checks once")
	return cmd
}

// notYetJSON is the line query --after --json prints when the index has
// not passed the position in time, so that a program reading the hits
// tells "not yet" from "no hits".
type notYetJSON struct {
	Status string  `json:"status"` // "not_yet"
	After  string  `json:"after"`
	Waited float64 `json:"waited_seconds"`
	Why    string  `json:"why"`
}

// waitAfter waits for the index to pass a; when it does not in time, it
// prints the not-yet line (--json) and returns the not-yet error with
// ExitNotYet.
func waitAfter(cmd *cobra.Command, cfg Config, a cdc.After, wait time.Duration, asJSON bool, logger *slog.Logger) error {
	err := service.WaitAfter(cmd.Context(), cfg.indexConfig(), a, wait, logger)
	var ny *sink.NotYetError
	if !errors.As(err, &ny) {
		return err
	}
	if asJSON {
		line := notYetJSON{Status: "not_yet", After: ny.After, Waited: ny.Waited.Seconds(), Why: ny.Why}
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(line); err != nil {
			return err
		}
	}
	return &exitError{ExitNotYet, err}
}

// errNotYet is what a `query --after` that got no answer in time fails
// with (in an exitError with ExitNotYet), whether it waited itself or the
// front door answered not_yet.
var errNotYet = sink.ErrNotYet

// queryViaRedis sends the query through the front door's Redis Stream
// protocol (service.SearchFrontDoor).
func queryViaRedis(cmd *cobra.Command, cfg Config, q fallback.Query, table string, timeout time.Duration, asJSON bool) error {
	if table != "" {
		q.Filter[fallback.FilterTable] = table
	}
	fcfg := cfg.FrontDoorConfig()
	if err := checkFilters(q.Filter, fcfg.AllowedFilters); err != nil {
		return err
	}
	res, err := service.SearchFrontDoor(cmd.Context(), fcfg, q, timeout)
	if err != nil {
		return err
	}
	hits := make([]sink.Hit, len(res.Hits))
	for i, h := range res.Hits {
		p := h.Provenance
		hits[i] = sink.Hit{DocID: h.DocID, Table: h.Table, Key: h.Key, Position: h.Position, Text: h.Text, Score: h.Score, Metadata: h.Metadata,
			Model: p.Model, Dimensions: p.Dimensions, ModelVersion: p.ModelVersion, Chunker: p.Chunker,
			Source: p.Source, SourcePosition: p.SourcePosition, CommittedAt: p.CommittedAt, TraceID: p.TraceID}
	}
	if !asJSON {
		line := fmt.Sprintf("status %s, source %s, cached %t", res.Status, res.Source, res.Cached)
		if res.Reason != "" {
			line += ", reason: " + res.Reason
		}
		fmt.Fprintln(cmd.OutOrStdout(), line)
	}
	if res.Status == fallback.StatusNotYet {
		// The status line (stdout) says it for a reader; the error
		// (stderr) and the exit code for a script.
		return &exitError{ExitNotYet, fmt.Errorf("query --after %s: %w: %s", q.After, errNotYet, strings.TrimPrefix(res.Reason, "not yet: "))}
	}
	return printHits(cmd, hits, asJSON)
}

// checkFilters refuses, before sending, the --filter keys the front door
// would refuse, naming the setting that allows them.
func checkFilters(filter map[string]any, allowed []string) error {
	var refused []string
	for k := range filter {
		if !slices.Contains(allowed, k) {
			refused = append(refused, k)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	return fmt.Errorf("--filter %s: the front door only accepts the keys in frontdoor.allowed_filters (now: %s); add %s there and restart serve, or query without --via redis",
		strings.Join(refused, ", "), strings.Join(allowed, ", "), strings.Join(refused, ", "))
}

// hitJSON is one line of query --json: the front door protocol's result
// fields (doc_id, table, key, position, text, score, metadata, provenance)
// plus rank.
type hitJSON struct {
	Rank     int            `json:"rank"`
	DocID    string         `json:"doc_id"`
	Table    string         `json:"table"`
	Key      string         `json:"key"`
	Position int            `json:"position"`
	Score    score          `json:"score"`
	Text     string         `json:"text"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// VectorReused marks a hit whose vector is reused from a
	// near-duplicate text and not yet repaid (see reuse.repay_window).
	VectorReused bool `json:"vector_reused,omitempty"`
	// Provenance is where the chunk came from; unknown values are null.
	Provenance fallback.Provenance `json:"provenance"`
}

// score is a hit's score in JSON: null when it is not a finite number (a
// chunk stored with a zero vector, before such vectors were refused, has
// no cosine similarity), since JSON has no NaN and one such hit must not
// fail the whole output.
type score float64

func (s score) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(s))
}

func printHits(cmd *cobra.Command, hits []sink.Hit, asJSON bool) error {
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		for i, h := range hits {
			if err := enc.Encode(hitJSON{i + 1, h.DocID, h.Table, h.Key, h.Position, score(h.Score), h.Text, h.Metadata, h.Reused, fallback.ProvenanceOf(h)}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(hits) == 0 {
		fmt.Fprintln(out, "no results")
		return nil
	}
	for i, h := range hits {
		fmt.Fprintf(out, "%2d. %.4f  %s #%d\n    %s\n", i+1, h.Score, h.DocID, h.Position, snippet(h.Text, 160))
	}
	return nil
}

// snippet flattens text to one line of at most n runes.
func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
