// Package child holds what the benchmarks that run `ragsync serve --once`
// as a child process share: the settings every such child runs with, and
// the change counts read back from its summary.
package child

import (
	"fmt"
	"strconv"
	"strings"
)

// Settings is the part of ragsync.yaml every bench child shares: the
// articles table (rows matching match), the greedy chunker and the offline
// hashing embedder, so that the benches measure the same pipeline, writing
// into schema of pgURL as index. Callers put their source: section before
// it and may add sections of their own after it.
func Settings(match, pgURL, schema, index string) string {
	return fmt.Sprintf(`tables:
  - match: %s
    id: [id]
    text: "# {{title}}\n\n{{body}}"
chunker:
  strategy: greedy
  target_tokens: 60
  min_tokens: 20
  max_tokens: 200
embedder:
  provider: hashing
  dimensions: 256
postgres:
  url: %s
  schema: %s
index: %s
http:
  listen: ""
`, match, pgURL, schema, index)
}

// Drained sums the op_* counts of a `serve --once` summary (op_c=…
// op_u=…): how many changes the child applied. A bench compares it with
// what it produced, so that a child that stopped early cannot pass.
func Drained(summary string) int {
	n := 0
	for _, f := range strings.Fields(summary) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "op_") {
			c, _ := strconv.Atoi(v)
			n += c
		}
	}
	return n
}
