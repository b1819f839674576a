// Package backlog builds the synthetic Debezium backlog that the backlog
// and monitor benchmarks drain (and the words the throughput corpus is made
// of): documents created, then updated in turn,
// from paragraphs of made-up words, so each benchmark measures ragsync on
// the same load.
package backlog

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// vocabulary has 512 made-up words (8 onsets × 8 vowels × 8 codas), so that
// paragraphs drawn from it are distinct. An earlier generator cycled through
// 23 words and produced only 23 distinct paragraphs: tens of thousands of
// identical vectors, which HNSW is not built for (each insert explores the
// whole cluster of equal neighbours) and which made the benchmark measure
// that pathology instead of ragsync.
var vocabulary = func() []string {
	onsets, vowels, codas := []string{"b", "d", "k", "l", "m", "r", "s", "t"}, []string{"a", "e", "i", "o", "u", "ai", "ou", "ea"}, []string{"n", "r", "s", "th", "l", "m", "x", "nd"}
	var ws []string
	for _, o := range onsets {
		for _, v := range vowels {
			for _, c := range codas {
				ws = append(ws, o+v+c)
			}
		}
	}
	return ws
}()

// Para is a 25-word paragraph determined by seed.
func Para(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ws := make([]string, 25)
	for k := range ws {
		ws[k] = Word(rng)
	}
	return strings.Join(ws, " ") + "."
}

// Word is one of the made-up words, chosen by rng: text drawn from them
// has the variety HNSW needs (see vocabulary).
func Word(rng *rand.Rand) string { return vocabulary[rng.IntN(len(vocabulary))] }

// Event is the i-th change of a backlog over docs documents (table
// public.articles, key {"id":n}): each document is created, then updated in
// turn, each update replacing the middle one of its three paragraphs.
// Positions (lsn) grow with i.
func Event(i, docs int) *kgo.Record {
	id := i % docs
	round := i / docs
	op := "c"
	if round > 0 {
		op = "u"
	}
	lsn := int64(1000 + i)
	body := Para(uint64(3*id)) + "\n\n" + Para(uint64(3*(id+round*docs)+1)) + "\n\n" + Para(uint64(3*id+2))
	v, _ := json.Marshal(map[string]any{
		"op": op, "ts_ms": 1700000000000 + lsn,
		"before": nil,
		"after":  map[string]any{"id": id, "title": fmt.Sprintf("Doc %d", id), "body": body},
		"source": map[string]any{"connector": "postgresql", "db": "app", "schema": "public", "table": "articles",
			"lsn": lsn, "txId": lsn, "ts_ms": 1700000000000 + lsn},
	})
	return &kgo.Record{Key: fmt.Appendf(nil, `{"id":%d}`, id), Value: v}
}
