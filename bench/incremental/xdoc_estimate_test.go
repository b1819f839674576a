package main

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// TestCrossDocBound estimates how many update tokens cross-document
// near-duplicate reuse could save on a data set, before building it (issue
// 3): it replays the history sequentially with ragsync's rules (exact
// content-hash cache, same-document reuse against origin texts at edit
// similarity 0.90, soft-deleted chunks staying cached) and, for each chunk
// still to embed, asks whether any text ever embedded is ≥ 0.90 similar to
// it. It is an upper bound for that rule: it verifies against every origin,
// where an index would only find candidates. RAGSYNC_XDOC_SAMPLE keeps a
// share of the documents as the benchmark's -sample does. About a minute
// of CPU on edits-C (20 s on edits-A at 0.3):
//
//	RAGSYNC_XDOC_SET=edits-C go test -count=1 -run TestCrossDocBound -v ./bench/incremental
func TestCrossDocBound(t *testing.T) {
	set := os.Getenv("RAGSYNC_XDOC_SET")
	if set == "" {
		t.Skip("set RAGSYNC_XDOC_SET")
	}
	const minSim = 0.90
	evs, err := readEvents(filepath.Join("..", "..", "..", "shared", "data", set, "events.jsonl.gz"), 0)
	require.NoError(t, err)
	if v := os.Getenv("RAGSYNC_XDOC_SAMPLE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err)
		evs = sampleDocs(evs, f) // as -sample does
	}
	ch, err := chunker.New(chunker.Config{TargetTokens: 470}.WithDefaults())
	require.NoError(t, err)

	type entry struct {
		hash string
		text string // normalised
	}
	var origins []entry
	cache := map[string]int{}    // content hash → index in origins
	post := map[uint64][]int32{} // 3-word shingle → origins holding it
	type stored struct{ hash, vhash string }
	docs := map[string][]stored{}
	shingleKeys := func(w []string) map[uint64]bool {
		out := map[uint64]bool{}
		k := 3
		if len(w) < k {
			k = len(w)
		}
		for i := 0; i+k <= len(w); i++ {
			h := fnv.New64a()
			h.Write([]byte(strings.Join(w[i:i+k], " ")))
			out[h.Sum64()] = true
		}
		return out
	}
	add := func(hash, norm string) int {
		id := len(origins)
		origins = append(origins, entry{hash, norm})
		cache[hash] = id
		for s := range shingleKeys(strings.Fields(norm)) {
			post[s] = append(post[s], int32(id))
		}
		return id
	}
	sumTok, exactTok, sameDocTok, xdocTok, embedTok := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, e := range evs {
		if e.Op == "d" {
			delete(docs, e.DocID)
			continue
		}
		// Deleted docs keep their chunks in ragsync (soft delete), and a
		// rename is a new id, so same-document origins are the doc's own.
		prev := docs[e.DocID]
		var cur []stored
		seenHere := map[string]bool{}
		for _, c := range ch.Split(*e.Body) {
			op := e.Op
			sumTok[op] += c.Tokens
			if _, ok := cache[c.Hash]; ok || seenHere[c.Hash] {
				exactTok[op] += c.Tokens
				vh := c.Hash
				for _, p := range prev {
					if p.hash == c.Hash {
						vh = p.vhash
					}
				}
				cur = append(cur, stored{c.Hash, vh})
				continue
			}
			norm := chunker.Normalize(c.Text)
			// Same document: origins of the stored chunks.
			best := ""
			bestSim := 0.0
			for _, p := range prev {
				id, ok := cache[p.vhash]
				if !ok {
					continue
				}
				if s := chunker.EditSimilarity(norm, origins[id].text, minSim); s >= minSim && s > bestSim {
					best, bestSim = p.vhash, s
				}
			}
			if best != "" {
				sameDocTok[op] += c.Tokens
				cur = append(cur, stored{c.Hash, best})
				continue
			}
			if op != "r" {
				w := strings.Fields(norm)
				q := shingleKeys(w)
				counts := map[int32]int{}
				for s := range q {
					for _, id := range post[s] {
						counts[id]++
					}
				}
				// Edit similarity ≥ 0.9 allows D ≤ 0.1·(n+m) word edits,
				// each breaking at most 3 shingles, so a match shares well
				// over a fifth of the query's shingles; fewer is no match.
				bestID := -1
				for id, n := range counts {
					if float64(n) < 0.2*float64(len(q)) {
						continue
					}
					if s := chunker.EditSimilarity(norm, origins[id].text, minSim); s >= minSim && s > bestSim {
						bestID, bestSim = int(id), s
					}
				}
				if bestID >= 0 {
					xdocTok[op] += c.Tokens
					// Reused: the origin stays the other text's.
					cur = append(cur, stored{c.Hash, origins[bestID].hash})
					continue
				}
			}
			embedTok[op] += c.Tokens
			add(c.Hash, norm)
			seenHere[c.Hash] = true
			cur = append(cur, stored{c.Hash, c.Hash})
		}
		docs[e.DocID] = cur
	}
	for _, op := range []string{"r", "u", "c"} {
		t.Logf("%s: chunk tokens %d, exact %d, same-doc reuse %d, cross-doc reusable %d, embedded %d",
			op, sumTok[op], exactTok[op], sameDocTok[op], xdocTok[op], embedTok[op])
	}
}
