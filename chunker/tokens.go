package chunker

import (
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// cl100k is loaded on first use: building the vocabulary map costs tens of
// milliseconds and memory that a process which never counts should not pay.
var cl100k = sync.OnceValue(func() tokenizer.Codec {
	enc, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		// The vocabulary is compiled in; failing here is a build defect.
		panic("chunker: load cl100k_base: " + err.Error())
	}
	return enc
})

// CountTokens returns the number of cl100k_base BPE tokens of s, the encoding
// of OpenAI's text-embedding-3 and ada-002 models. It is safe for concurrent
// use.
func CountTokens(s string) int {
	if s == "" {
		return 0
	}
	return countPieces(s, countBPE)
}

// countBPE is the tokenizer's own count.
func countBPE(s string) int {
	n, err := cl100k().Count(s)
	if err != nil {
		// Count only fails on a regexp engine error; a byte count is an upper
		// bound of the BPE count, so limits stay safe.
		return len(s)
	}
	return n
}
