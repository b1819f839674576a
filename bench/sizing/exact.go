package main

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// parallel runs fn(0..n-1) on workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func dot(a, b []float32) float64 {
	var s float32
	for i, x := range a {
		s += x * b[i]
	}
	return float64(s)
}

// exactKth returns, for each query, the cosine similarity of its k-th
// nearest vector among base (brute force; every vector is unit length, so
// cosine is the dot product).
func exactKth(queries, base [][]float32, k, workers int) []float64 {
	out := make([]float64, len(queries))
	parallel(len(queries), workers, func(q int) {
		top := make([]float64, 0, k+1) // ascending, the k best so far
		for _, v := range base {
			s := dot(queries[q], v)
			if len(top) == k && s <= top[0] {
				continue
			}
			i := sort.SearchFloat64s(top, s)
			top = slices.Insert(top, i, s)
			if len(top) > k {
				top = top[1:]
			}
		}
		if len(top) < k {
			out[q] = math.Inf(-1)
			return
		}
		out[q] = top[0]
	})
	return out
}

// tieSlack is how far below the exact k-th similarity a hit may be and
// still count as one of the k nearest: float32 sums in another order, and
// texts whose content words are the same get the same vector, so the k-th
// place can be shared.
const tieSlack = 1e-5

// recallAt is the share of the exact k nearest that the hits found: a hit
// counts when its true similarity (computed here in full precision, never
// the index's score) reaches the k-th nearest's. Hits beyond k are ignored;
// fewer than k hits count as misses.
func recallAt(query []float32, hits [][]float32, kth float64, k int) float64 {
	found := 0
	for i, h := range hits {
		if i == k {
			break
		}
		if dot(query, h) >= kth-tieSlack {
			found++
		}
	}
	return float64(found) / float64(k)
}

// percentile is the p-quantile (0..1) of ds by the nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
