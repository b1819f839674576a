package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Stats counts what the pipeline did, for the run summary that `serve --once`
// and the demo print. Metrics carry the same numbers for Prometheus.
type Stats struct {
	mu *sync.Mutex
	n  map[string]int
}

func newStats() Stats { return Stats{mu: &sync.Mutex{}, n: map[string]int{}} }

func (s Stats) add(key string, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.n[key] += n
	s.mu.Unlock()
}

func (s Stats) snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Snapshot(maps.Clone(s.n))
}

// Snapshot is a copy of the pipeline's counters: "op_c", "op_u", "op_d",
// "op_r", "op_t", "op_m" count changes by Debezium op; "applied", "stale",
// "duplicate", "unmatched_table", "skipped_<reason>", "dead_lettered" count
// outcomes; "chunks_embedded", "chunks_cached", "chunks_inserted",
// "chunks_unchanged", "chunks_moved", "chunks_removed" count chunks
// ("chunks_cached" and "chunks_reused" only of writes that were applied:
// a stale or duplicate change saves nothing);
// "retries" counts retried failures.
type Snapshot map[string]int

// String renders the counters sorted by name, "key=value" separated by spaces.
func (s Snapshot) String() string {
	keys := slices.Sorted(maps.Keys(s))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s[k])
	}
	return strings.Join(parts, " ")
}
