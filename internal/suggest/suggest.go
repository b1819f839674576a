// Package suggest finds the name a user most likely meant: the "did you
// mean" of configuration keys and index names. It must not know what the
// names are.
package suggest

// Distance is Levenshtein's edit distance over bytes (the names it
// compares are ASCII).
func Distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Nearest returns the candidate within a typo's distance of name (at most
// max(2, len(name)/3) edits): the nearest, and of equally near ones the
// first in byte order. It returns "" when none is that near.
func Nearest(name string, candidates []string) string {
	best, bestD := "", max(2, len(name)/3)+1
	for _, c := range candidates {
		if d := Distance(name, c); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}
