package embedder

import "github.com/ragsync/ragsync/chunker"

// span is a batch: texts[start:end].
type span struct{ start, end int }

// batches cuts texts into consecutive runs of at most maxInputs texts and
// maxTokens cl100k_base tokens. A text alone over maxTokens gets a batch of
// its own: the API, not us, decides whether it is too long.
func batches(texts []string, maxInputs, maxTokens int) []span {
	var out []span
	start, tokens := 0, 0
	for i, t := range texts {
		n := chunker.CountTokens(t)
		if i > start && (i-start >= maxInputs || tokens+n > maxTokens) {
			out = append(out, span{start, i})
			start, tokens = i, 0
		}
		tokens += n
	}
	return append(out, span{start, len(texts)})
}
