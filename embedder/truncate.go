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

// fitInputs applies MaxInputTokens: inputs over it are truncated (counted
// in Stats.Truncated) or, with OnTooLong "dead_letter", fail permanently so
// the pipeline dead-letters the change. texts is not modified.
func (o *OpenAI) fitInputs(texts []string) ([]string, error) {
	out := texts
	for i, t := range texts {
		n := chunker.CountTokens(t)
		if n <= o.cfg.MaxInputTokens {
			continue
		}
		if o.cfg.OnTooLong == TooLongDeadLetter {
			return nil, &InputError{Index: i, Reason: fmt.Sprintf("%d tokens, over embedder.max_input_tokens %d (embedder.on_too_long: dead_letter)", n, o.cfg.MaxInputTokens)}
		}
		cut, err := truncateTokens(t, o.cfg.MaxInputTokens)
		if err != nil {
			return nil, err
		}
		if &out[0] == &texts[0] {
			out = append([]string(nil), texts...)
		}
		out[i] = cut
		o.stats.truncated.Add(1)
	}
	return out, nil
}
