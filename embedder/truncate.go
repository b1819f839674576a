package embedder

import (
	"fmt"
	"sync"

	"github.com/tiktoken-go/tokenizer"

	"github.com/ragsync/ragsync/chunker"
)

// What to do with an input over Config.MaxInputTokens.
const (
	TooLongTruncate   = "truncate"
	TooLongDeadLetter = "dead_letter"
)

var cl100k = sync.OnceValues(func() (tokenizer.Codec, error) { return tokenizer.Get(tokenizer.Cl100kBase) })

// truncateTokens cuts s to its first max cl100k_base tokens. The model reads
// only what fits its context, so the head of a text is what a truncated
// embedding can represent (OpenAI's own guidance for over-long inputs).
func truncateTokens(s string, limit int) (string, error) {
	enc, err := cl100k()
	if err != nil {
		return "", fmt.Errorf("load cl100k_base: %w", err)
	}
	ids, _, err := enc.Encode(s)
	if err != nil {
		return "", fmt.Errorf("tokenize: %w", err)
	}
	if len(ids) <= limit {
		return s, nil
	}
	return enc.Decode(ids[:limit])
}

// fitInputs applies MaxInputTokens to texts whose counts are tokens:
// inputs over it are truncated (counted in Stats.Truncated) or, with
// OnTooLong "dead_letter", fail permanently so the pipeline dead-letters
// the change. Neither slice is modified; the results are copies if needed.
func (o *OpenAI) fitInputs(texts []string, tokens []int) ([]string, []int, error) {
	out, outTokens := texts, tokens
	for i, t := range texts {
		n := tokens[i]
		if n <= o.cfg.MaxInputTokens {
			continue
		}
		if o.cfg.OnTooLong == TooLongDeadLetter {
			return nil, nil, &InputError{Index: i, Reason: fmt.Sprintf("%d tokens, over embedder.max_input_tokens %d (embedder.on_too_long: dead_letter)", n, o.cfg.MaxInputTokens)}
		}
		cut, err := truncateTokens(t, o.cfg.MaxInputTokens)
		if err != nil {
			return nil, nil, err
		}
		if &out[0] == &texts[0] {
			out = append([]string(nil), texts...)
			outTokens = append([]int(nil), tokens...)
		}
		out[i], outTokens[i] = cut, chunker.CountTokens(cut)
		o.stats.truncated.Add(1)
	}
	return out, outTokens, nil
}
