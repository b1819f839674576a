// Package vector holds what every room that handles embedding vectors must
// agree on: which vectors can be searched at all. The embedder refuses a
// provider's unsearchable vector for a text, the sink refuses one as a
// query, and the front door answers such a query at once; one rule keeps
// the three in step.
package vector

import "math"

// Unsearchable says why v cannot be searched, "" when it can: a vector
// holding NaN or ±Inf has no distance to anything, and a zero vector
// (every entry 0) has no direction, so its cosine distance to any vector
// is NaN (pgvector answers NaN) and it could never be found nor rank
// anything. A provider returning one for a text must not put it in the
// index, nor search with it.
func Unsearchable(v []float32) string {
	zero := true
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return "a vector holding NaN or Inf, which cannot be searched"
		}
		zero = zero && f == 0
	}
	if zero {
		return "a zero vector (every entry 0), which has no cosine distance to anything and can never be found"
	}
	return ""
}
