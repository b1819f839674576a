package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// text is one chunk of the corpus: its text and content hash.
type text struct {
	body, hash string
}

// corpus is what a run loads and asks: the held-out query texts, the N
// texts of the bulk build and the texts inserted online after it. No text
// is in two of them (distinct content hashes).
type corpus struct {
	queries, build, insert []text
	// source says where the texts came from, for the output.
	source string
}

// dataSets are the edits-* sets of ../shared/data whose document bodies
// are chunked into the corpus.
var dataSets = []string{"edits-A", "edits-C"}

// loadCorpus returns nQueries + nBuild + nInsert distinct chunk texts: the
// distinct chunks (chunker at targetTokens) of every version of every
// document of the data sets in dataDir, shuffled with seed; when they are
// fewer than needed, joined pairs of them fill the rest (still real words,
// each pair's vector between its two halves'). Queries are always single
// chunks. Without dataDir's sets the texts are synthetic paragraphs (the
// output says so).
func loadCorpus(dataDir string, targetTokens, nQueries, nBuild, nInsert int, seed uint64) (*corpus, error) {
	need := nQueries + nBuild + nInsert
	rng := rand.New(rand.NewPCG(seed, 41))
	pool, err := realChunks(dataDir, targetTokens)
	var source string
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Printf("sizing: %s not found: the texts are synthetic paragraphs (a 512-word vocabulary), not real text\n", dataDir)
		pool = syntheticChunks(need, seed)
		source = "synthetic paragraphs"
	case err != nil:
		return nil, err
	default:
		source = fmt.Sprintf("%d distinct chunks (chunker target_tokens %d) of every version of %s in %s",
			len(pool), targetTokens, strings.Join(dataSets, ", "), dataDir)
	}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	if len(pool) < nQueries+2 {
		return nil, fmt.Errorf("only %d texts: need at least %d (lower -queries)", len(pool), nQueries+2)
	}
	c := &corpus{queries: pool[:nQueries], source: source}
	rest := pool[nQueries:]
	if short := need - len(pool); short > 0 {
		seen := make(map[string]bool, len(pool)+short)
		for _, t := range pool {
			seen[t.hash] = true
		}
		real := len(rest)
		for added := 0; added < short; {
			a, b := rest[rng.IntN(real)], rest[rng.IntN(real)]
			body := a.body + "\n\n" + b.body
			h := chunker.Hash(body)
			if seen[h] {
				continue
			}
			seen[h] = true
			rest = append(rest, text{body: body, hash: h})
			added++
		}
		c.source += fmt.Sprintf(", and %d joined pairs of them to reach %d", short, need)
		// Mix the pairs in, so the build and the inserts hold the same share.
		rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	}
	c.build = rest[:nBuild]
	c.insert = rest[nBuild : nBuild+nInsert]
	return c, nil
}

// realChunks chunks every body of every event of the data sets and keeps
// each distinct chunk once. os.ErrNotExist when a set is missing.
func realChunks(dataDir string, targetTokens int) ([]text, error) {
	ck, err := chunker.New(chunker.Config{TargetTokens: targetTokens, MinTokens: max(1, targetTokens/4), MaxTokens: targetTokens * 2})
	if err != nil {
		return nil, fmt.Errorf("-target-tokens %d: %w", targetTokens, err)
	}
	seen := map[string]bool{}
	var out []text
	for _, set := range dataSets {
		path := filepath.Join(dataDir, set, "events.jsonl.gz")
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer f.Close()
			zr, err := gzip.NewReader(f)
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			sc := bufio.NewScanner(zr)
			// Bodies go up to 200 KiB, escaped in JSON.
			sc.Buffer(make([]byte, 0, 1<<20), 4<<20)
			for sc.Scan() {
				var e struct {
					Body *string `json:"body"`
				}
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					return fmt.Errorf("read %s: %w", path, err)
				}
				if e.Body == nil {
					continue
				}
				for _, ch := range ck.Split(*e.Body) {
					if !seen[ch.Hash] {
						seen[ch.Hash] = true
						out = append(out, text{body: ch.Text, hash: ch.Hash})
					}
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// syntheticChunks returns n distinct paragraphs of ~60 words.
func syntheticChunks(n int, seed uint64) []text {
	out := make([]text, 0, n)
	seen := map[string]bool{}
	rng := rand.New(rand.NewPCG(seed, 43))
	for len(out) < n {
		var b strings.Builder
		for w := range 60 {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(backlog.Word(rng))
		}
		b.WriteByte('.')
		h := chunker.Hash(b.String())
		if !seen[h] {
			seen[h] = true
			out = append(out, text{body: b.String(), hash: h})
		}
	}
	return out
}

// sparse is a hashing vector's non-zero entries.
type sparse struct {
	idx []int32
	val []float32
}

// hashVectors embeds texts with the hashing embedder at baseDims and keeps
// the non-zero entries (a bag of hashed words is mostly zeros).
func hashVectors(ctx context.Context, texts []text, baseDims int) ([]sparse, error) {
	h := embedder.NewHashing(baseDims)
	out := make([]sparse, len(texts))
	for i, t := range texts {
		vs, err := h.Embed(ctx, []string{t.body})
		if err != nil {
			return nil, err
		}
		var s sparse
		for j, x := range vs[0] {
			if x != 0 {
				s.idx = append(s.idx, int32(j))
				s.val = append(s.val, x)
			}
		}
		out[i] = s
	}
	return out, nil
}

// projection is a fixed random Gaussian matrix (baseDims × dims, seeded):
// it maps a sparse hashing vector to a dense one whose cosines with other
// projected vectors are close to the hashing vectors' (Johnson-
// Lindenstrauss), the way a model's embeddings are dense.
type projection struct {
	dims int
	rows [][]float32
}

func newProjection(baseDims, dims int, seed uint64) *projection {
	rng := rand.New(rand.NewPCG(seed, uint64(dims)))
	p := &projection{dims: dims, rows: make([][]float32, baseDims)}
	for i := range p.rows {
		r := make([]float32, dims)
		for j := range r {
			r[j] = float32(rng.NormFloat64())
		}
		p.rows[i] = r
	}
	return p
}

// apply returns s projected to p.dims, unit length.
func (p *projection) apply(s sparse) []float32 {
	acc := make([]float64, p.dims)
	for k, i := range s.idx {
		x := float64(s.val[k])
		for j, r := range p.rows[i] {
			acc[j] += x * float64(r)
		}
	}
	var norm float64
	for _, x := range acc {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, p.dims)
	if norm == 0 {
		// An empty text: no direction. Give it one, or pgvector's cosine
		// distance is NaN.
		out[0] = 1
		return out
	}
	for j, x := range acc {
		out[j] = float32(x / norm)
	}
	return out
}

// applyAll projects every vector, on workers goroutines.
func (p *projection) applyAll(vs []sparse, workers int) [][]float32 {
	out := make([][]float32, len(vs))
	parallel(len(vs), workers, func(i int) { out[i] = p.apply(vs[i]) })
	return out
}
