package main

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func randomUnit(rng *rand.Rand, d int) []float32 {
	v := make([]float32, d)
	var n float64
	for i := range v {
		v[i] = float32(rng.NormFloat64())
		n += float64(v[i] * v[i])
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	return v
}

// The k-th similarity matches a full sort, and recall counts exactly the
// hits at or above it.
func TestExactKthAndRecall(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([][]float32, 500)
	for i := range base {
		base[i] = randomUnit(rng, 16)
	}
	queries := [][]float32{randomUnit(rng, 16), randomUnit(rng, 16)}
	kth := exactKth(queries, base, 10, 2)
	for q, query := range queries {
		order := make([]int, len(base))
		sims := make([]float64, len(base))
		for i := range base {
			order[i], sims[i] = i, dot(query, base[i])
		}
		slices.SortFunc(order, func(a, b int) int {
			if sims[a] > sims[b] {
				return -1
			}
			if sims[a] < sims[b] {
				return 1
			}
			return 0
		})
		if want := sims[order[9]]; kth[q] != want {
			t.Fatalf("query %d: k-th similarity %v, want %v", q, kth[q], want)
		}
		top := make([][]float32, 10)
		for i := range top {
			top[i] = base[order[i]]
		}
		if r := recallAt(query, top, kth[q], 10); r != 1 {
			t.Fatalf("query %d: the exact top 10 has recall %v, want 1", q, r)
		}
		// Swap the 10th for the 11th and the 12th for the 1st: 8 of 10.
		worse := slices.Clone(top)
		worse[9], worse[0] = base[order[10]], base[order[11]]
		if r := recallAt(query, worse, kth[q], 10); r != 0.8 {
			t.Fatalf("query %d: recall %v with two of the top 10 missing, want 0.8", q, r)
		}
		// Fewer hits than k count as misses; hits past k are ignored.
		if r := recallAt(query, top[:5], kth[q], 10); r != 0.5 {
			t.Fatalf("query %d: recall %v with 5 hits, want 0.5", q, r)
		}
		if r := recallAt(query, append(slices.Clone(worse), top...), kth[q], 10); r != 0.8 {
			t.Fatalf("query %d: recall %v counted hits past k", q, r)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(ds, 0.5); p != 50*time.Millisecond {
		t.Fatalf("p50 %v, want 50ms", p)
	}
	if p := percentile(ds, 0.99); p != 99*time.Millisecond {
		t.Fatalf("p99 %v, want 99ms", p)
	}
	if ds[0] != 100*time.Millisecond {
		t.Fatal("percentile sorted its input in place")
	}
}

// The projection makes dense unit vectors whose cosines stay close to the
// hashing vectors' (what makes recall on them meaningful), and is the same
// for the same seed.
func TestProjectionKeepsCosines(t *testing.T) {
	texts := []text{
		{body: "the kubernetes scheduler assigns pods to nodes by resources"},
		{body: "the kubernetes scheduler places pods onto nodes by their resources"},
		{body: "list files in a directory with their sizes and permissions"},
		{body: "compress a directory into a tar archive with gzip"},
	}
	hv, err := hashVectors(context.Background(), texts, 4096)
	if err != nil {
		t.Fatal(err)
	}
	sparseDot := func(a, b sparse) float64 {
		m := map[int32]float32{}
		for k, i := range a.idx {
			m[i] = a.val[k]
		}
		var s float64
		for k, i := range b.idx {
			s += float64(m[i] * b.val[k])
		}
		return s
	}
	p := newProjection(4096, 1536, 7)
	vs := p.applyAll(hv, 2)
	for i, v := range vs {
		var n float64
		zeros := 0
		for _, x := range v {
			n += float64(x * x)
			if x == 0 {
				zeros++
			}
		}
		if math.Abs(n-1) > 1e-4 || zeros > 0 {
			t.Fatalf("vector %d: squared norm %v, %d zeros: want unit length and dense", i, n, zeros)
		}
	}
	for i := range vs {
		for j := i + 1; j < len(vs); j++ {
			want, got := sparseDot(hv[i], hv[j]), dot(vs[i], vs[j])
			// JL at 1536 dims: the error's standard deviation is about 1/sqrt(1536) ≈ 0.026.
			if math.Abs(got-want) > 0.1 {
				t.Errorf("texts %d and %d: projected cosine %.3f, hashing cosine %.3f", i, j, got, want)
			}
		}
	}
	if s := sparseDot(hv[0], hv[1]); s < 0.3 || dot(vs[0], vs[1]) < dot(vs[0], vs[2])+0.2 {
		t.Errorf("the two scheduler texts should stay far closer than unrelated ones: hashing %.3f, projected %.3f vs %.3f", s, dot(vs[0], vs[1]), dot(vs[0], vs[2]))
	}
	again := newProjection(4096, 1536, 7).apply(hv[0])
	if !slices.Equal(again, vs[0]) {
		t.Fatal("the same seed gave another projection")
	}
}
