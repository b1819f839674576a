package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

func TestCompareIndexes(t *testing.T) {
	base := func() map[string]indexedDoc {
		return map[string]indexedDoc{
			"t/a": {Hashes: []string{"h1", "h2"}, Texts: []string{"one", "two"}, Vectors: [][]float32{{1, 0}, {0, 1}}},
			"t/b": {},
		}
	}
	tests := []struct {
		name   string
		mutate func(got map[string]indexedDoc)
		check  func(t *testing.T, c comparison)
	}{
		{name: "equal", mutate: func(map[string]indexedDoc) {}, check: func(t *testing.T, c comparison) {
			require.True(t, c.Pass)
			require.Equal(t, 2, c.Documents)
			require.Equal(t, 2, c.Chunks)
		}},
		{name: "missing document", mutate: func(g map[string]indexedDoc) { delete(g, "t/b") }, check: func(t *testing.T, c comparison) {
			require.False(t, c.Pass)
			require.Equal(t, 1, c.MissingDocs)
		}},
		{name: "extra document", mutate: func(g map[string]indexedDoc) { g["t/z"] = indexedDoc{} }, check: func(t *testing.T, c comparison) {
			require.False(t, c.Pass)
			require.Equal(t, 1, c.ExtraDocs)
			require.Contains(t, c.Examples, "extra document t/z")
		}},
		{name: "chunks in another order", mutate: func(g map[string]indexedDoc) {
			g["t/a"] = indexedDoc{Hashes: []string{"h2", "h1"}, Texts: []string{"two", "one"}, Vectors: [][]float32{{0, 1}, {1, 0}}}
		}, check: func(t *testing.T, c comparison) {
			require.False(t, c.Pass)
			require.Equal(t, 1, c.ChunkMismatch)
			require.Zero(t, c.TextOnly)
		}},
		{name: "same hash, stale text", mutate: func(g map[string]indexedDoc) {
			g["t/a"] = indexedDoc{Hashes: []string{"h1", "h2"}, Texts: []string{"one", "two  "}, Vectors: [][]float32{{1, 0}, {0, 1}}}
		}, check: func(t *testing.T, c comparison) {
			require.False(t, c.Pass)
			require.Equal(t, 1, c.ChunkMismatch)
			require.Equal(t, 1, c.TextOnly)
		}},
		{name: "different vector is measured, not failed", mutate: func(g map[string]indexedDoc) {
			g["t/a"] = indexedDoc{Hashes: []string{"h1", "h2"}, Texts: []string{"one", "two"}, Vectors: [][]float32{{1, 0}, {0.6, 0.8}}}
		}, check: func(t *testing.T, c comparison) {
			require.True(t, c.Pass)
			require.Equal(t, 1, c.VectorsDiffer)
			require.InDelta(t, 0.2, c.MaxVectorDist, 1e-6)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := base()
			tc.mutate(got)
			c := compareIndexes(got, base(), nil)
			tc.check(t, c)
			if c.Pass {
				require.Contains(t, c.String(), "PASS")
			} else {
				require.Contains(t, c.String(), "FAIL")
			}
		})
	}
}

// TestCompareIndexesRefined: a fresh chunk held as the pieces the refiner
// cuts it into passes, and is counted; pieces that are not its refinement
// fail, as without a refiner.
func TestCompareIndexesRefined(t *testing.T) {
	want := map[string]indexedDoc{
		"t/a": {Hashes: []string{"h1", "h2", "h3"}, Texts: []string{"one", "two three", "four"}, Vectors: [][]float32{{1, 0}, {0, 1}, {1, 1}}},
	}
	refine := func(text string) []chunker.Chunk {
		var out []chunker.Chunk
		for _, w := range strings.Fields(text) {
			out = append(out, chunker.Chunk{Text: w, Hash: "h-" + w})
		}
		return out
	}
	got := map[string]indexedDoc{
		"t/a": {Hashes: []string{"h1", "h-two", "h-three", "h3"}, Texts: []string{"one", "two", "three", "four"}, Vectors: [][]float32{{1, 0}, {0, 1}, {1, 0}, {1, 1}}},
	}
	c := compareIndexes(got, want, refine)
	require.True(t, c.Pass, c.String())
	require.Equal(t, 1, c.Refined)
	require.Equal(t, 2, c.Pieces)
	require.Equal(t, 4, c.Replayed)
	require.Zero(t, c.VectorsDiffer, "pieces have no fresh vector to differ from")

	require.False(t, compareIndexes(got, want, nil).Pass, "without a refiner the pieces are a mismatch")
	got["t/a"] = indexedDoc{Hashes: []string{"h1", "h-two", "h3"}, Texts: []string{"one", "two", "four"}, Vectors: [][]float32{{1, 0}, {0, 1}, {1, 1}}}
	require.False(t, compareIndexes(got, want, refine).Pass, "a piece missing is a mismatch")
}

func TestSentences(t *testing.T) {
	text := "# Title of the document\n\n" +
		"This first sentence has more than eight words in it. Short one. " +
		"And the third sentence also has enough words to count!\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n" +
		"- a list item that is long enough to be a query by itself\n" +
		"e.g. abbreviations split early but this part stays long enough"
	require.Equal(t, []string{
		"This first sentence has more than eight words in it.",
		"And the third sentence also has enough words to count!",
		"- a list item that is long enough to be a query by itself",
		"abbreviations split early but this part stays long enough",
	}, sentences(text))
}

func TestSampleQueries(t *testing.T) {
	docs := map[string]string{
		"a": "Alpha one two three four five six seven. Alpha eight nine ten eleven twelve thirteen fourteen.",
		"b": "Bravo one two three four five six seven.\n\nToo short.",
	}
	ids := []string{"a", "b"}
	q1 := sampleQueries(docs, ids, 2, 7)
	q2 := sampleQueries(docs, ids, 2, 7)
	require.Equal(t, q1, q2, "a fixed seed gives the same sample")
	require.Len(t, q1, 2)
	all := sampleQueries(docs, ids, 10, 7)
	require.Len(t, all, 3, "no more queries than eligible sentences")
	for _, q := range all {
		require.Contains(t, docs[q.DocID], q.Sentence)
	}
}

type fakeSearcher struct {
	hits map[float32][]sink.Hit // by the first vector entry
	err  error
}

func (f fakeSearcher) Search(_ context.Context, vec []float32, q sink.Query) ([]sink.Hit, error) {
	if f.err != nil {
		return nil, f.err
	}
	if q.K != recallK {
		return nil, errors.New("wrong k")
	}
	return f.hits[vec[0]], nil
}

func TestRecallAtK(t *testing.T) {
	qs := []query{{DocID: "a.md"}, {DocID: "b.md"}, {DocID: "c.md"}, {DocID: "d.md"}}
	vecs := [][]float32{{0}, {1}, {2}, {3}}
	s := fakeSearcher{hits: map[float32][]sink.Hit{
		0: {{DocID: sink.DocID(benchTable, "x.md")}, {DocID: sink.DocID(benchTable, "a.md")}}, // hit at rank 2
		1: {{DocID: sink.DocID(benchTable, "a.md")}},                                          // miss
		2: {{DocID: sink.DocID(benchTable, "c.md")}, {DocID: sink.DocID(benchTable, "c.md")}}, // one hit, not two
		3: nil,
	}}
	r, err := recallAtK(context.Background(), s, qs, vecs, recallK)
	require.NoError(t, err)
	require.InDelta(t, 0.5, r, 1e-9)

	_, err = recallAtK(context.Background(), fakeSearcher{err: errors.New("down")}, qs, vecs, recallK)
	require.ErrorContains(t, err, "down")
}
