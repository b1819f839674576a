package embedder

import (
	"fmt"

	"github.com/ragsync/ragsync/chunker"
)

// span is a batch: texts[start:end].
type span struct{ start, end int }

// batches cuts texts into consecutive runs of at most maxInputs texts and
// maxTokens tokens, tokens[i] being the count of texts[i]. A text alone
// over maxTokens gets a batch of its own: the API, not us, decides whether
// it is too long.
func batches(tokens []int, maxInputs, maxTokens int) []span {
	var out []span
	start, sum := 0, 0
	for i, n := range tokens {
		if i > start && (i-start >= maxInputs || sum+n > maxTokens) {
			out = append(out, span{start, i})
			start, sum = i, 0
		}
		sum += n
	}
	return append(out, span{start, len(tokens)})
}

// counts returns the cl100k_base count of every text: the caller's when it
// gave them (the chunker counted each chunk already), else counted
// here once.
func counts(texts []string, tokens []int) ([]int, error) {
	if tokens != nil {
		if len(tokens) != len(texts) {
			return nil, fmt.Errorf("%d token counts for %d texts", len(tokens), len(texts))
		}
		return tokens, nil
	}
	out := make([]int, len(texts))
	for i, t := range texts {
		out[i] = chunker.CountTokens(t)
	}
	return out, nil
}

func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

// inputs says "1 input" or "n inputs".
func inputs(n int) string {
	if n == 1 {
		return "1 input"
	}
	return fmt.Sprintf("%d inputs", n)
}
