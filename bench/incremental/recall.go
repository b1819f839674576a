package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"

	"github.com/ragsync/ragsync/sink"
)

// query is a self-retrieval probe: a sentence and the document it is from.
type query struct {
	DocID    string // source document id (the data set's doc_id)
	Sentence string
}

// Sentences shorter than this say too little to identify their document
// ("See below.", table separators, list stubs).
const minSentenceWords = 8

// sentences cuts text into sentences: at blank lines and line ends, then
// after '.', '!' or '?' followed by a space. It keeps those with at least
// minSentenceWords words of which most hold a letter, so Markdown tables,
// rules and code punctuation are not picked as queries.
func sentences(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		start := 0
		for i := 0; i < len(line); i++ {
			c := line[i]
			if (c == '.' || c == '!' || c == '?') && (i+1 == len(line) || line[i+1] == ' ') {
				out = appendSentence(out, line[start:i+1])
				start = i + 1
			}
		}
		out = appendSentence(out, line[start:])
	}
	return out
}

func appendSentence(out []string, s string) []string {
	s = strings.TrimSpace(s)
	words := strings.Fields(s)
	if len(words) < minSentenceWords {
		return out
	}
	wordy := 0
	for _, w := range words {
		if strings.IndexFunc(w, unicode.IsLetter) >= 0 {
			wordy++
		}
	}
	if 2*wordy < len(words)+1 {
		return out
	}
	return append(out, s)
}

// sampleQueries draws n sentences uniformly (without replacement) from the
// sentences of docs, visiting documents in the order of ids, with a fixed
// seed: the same data gives the same queries.
func sampleQueries(docs map[string]string, ids []string, n int, seed uint64) []query {
	var all []query
	for _, id := range ids {
		for _, s := range sentences(docs[id]) {
			all = append(all, query{DocID: id, Sentence: s})
		}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// searcher is the part of sink.Store recall needs.
type searcher interface {
	Search(ctx context.Context, vec []float32, q sink.Query) ([]sink.Hit, error)
}

// recallAtK is the share of queries for which one of the k nearest chunks
// belongs to the query's source document. vecs[i] is the embedding of
// qs[i].Sentence.
func recallAtK(ctx context.Context, s searcher, qs []query, vecs [][]float32, k int) (float64, error) {
	if len(qs) == 0 {
		return 0, nil
	}
	hits := 0
	for i, q := range qs {
		res, err := s.Search(ctx, vecs[i], sink.Query{K: k})
		if err != nil {
			return 0, fmt.Errorf("search query %d: %w", i, err)
		}
		want := sink.DocID(benchTable, q.DocID)
		for _, h := range res {
			if h.DocID == want {
				hits++
				break
			}
		}
	}
	return float64(hits) / float64(len(qs)), nil
}
