package monitor

import (
	"math"
	"slices"
)

// centroid is the mean of vs (nil for none).
func centroid(vs [][]float32) []float64 {
	if len(vs) == 0 {
		return nil
	}
	c := make([]float64, len(vs[0]))
	for _, v := range vs {
		for i := range min(len(c), len(v)) {
			c[i] += float64(v[i])
		}
	}
	for i := range c {
		c[i] /= float64(len(vs))
	}
	return c
}

func norm(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

func dot64(x []float64, v []float32) float64 {
	var s float64
	for i := range min(len(x), len(v)) {
		s += x[i] * float64(v[i])
	}
	return s
}

// centroidDistances returns the cosine distance and the Euclidean distance
// between two centroids.
func centroidDistances(a, b []float64) (cosine, euclid float64) {
	var d, s float64
	for i := range min(len(a), len(b)) {
		d += a[i] * b[i]
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	na, nb := norm(a), norm(b)
	if na == 0 || nb == 0 {
		return 1, math.Sqrt(s)
	}
	return 1 - d/(na*nb), math.Sqrt(s)
}

// principalDirections returns the top k unit eigenvectors of the covariance
// of vs about mean, by power iteration with deflation: O(k·iters·n·D) and no
// D×D matrix, so it stays cheap at 1536 dimensions. The start vector is
// fixed, so the same reference always gives the same directions.
func principalDirections(vs [][]float32, mean []float64, k, iters int) [][]float64 {
	d := len(mean)
	if len(vs) < 2 || d == 0 {
		return nil
	}
	var dirs [][]float64
	for range k {
		u := make([]float64, d)
		for i := range u {
			// A deterministic, non-degenerate start.
			u[i] = math.Sin(float64(i+1)*12.9898+float64(len(dirs))*78.233) + 0.01
		}
		normalise(u)
		for range iters {
			next := make([]float64, d)
			for _, v := range vs {
				// (v−mean)·u, then accumulate (v−mean)·that.
				var p float64
				for i := range d {
					p += (float64(v[i]) - mean[i]) * u[i]
				}
				for i := range d {
					next[i] += (float64(v[i]) - mean[i]) * p
				}
			}
			// Deflate: remove the directions already found.
			for _, w := range dirs {
				var p float64
				for i := range d {
					p += next[i] * w[i]
				}
				for i := range d {
					next[i] -= p * w[i]
				}
			}
			if normalise(next) == 0 {
				return dirs
			}
			u = next
		}
		dirs = append(dirs, u)
	}
	return dirs
}

func normalise(x []float64) float64 {
	n := norm(x)
	if n == 0 {
		return 0
	}
	for i := range x {
		x[i] /= n
	}
	return n
}

// projector maps a vector to the 1-D values drift is measured on: its cosine
// to the reference centroid, then its coordinate on each of the reference's
// principal directions.
type projector struct {
	centroid []float64
	cnorm    float64
	dirs     [][]float64
}

func newProjector(ref [][]float32, components int) projector {
	c := centroid(ref)
	return projector{centroid: c, cnorm: norm(c), dirs: principalDirections(ref, c, components, 30)}
}

// names of the projections, for events: "cosine_to_centroid", "pc1", …
func (p projector) names() []string {
	out := []string{"cosine_to_centroid"}
	for i := range p.dirs {
		out = append(out, "pc"+string(rune('1'+i)))
	}
	return out
}

// project returns one series per projection.
func (p projector) project(vs [][]float32) [][]float64 {
	out := make([][]float64, 1+len(p.dirs))
	for i := range out {
		out[i] = make([]float64, len(vs))
	}
	for j, v := range vs {
		var vn float64
		for _, x := range v {
			vn += float64(x) * float64(x)
		}
		if vn > 0 && p.cnorm > 0 {
			out[0][j] = dot64(p.centroid, v) / (math.Sqrt(vn) * p.cnorm)
		}
		for k, w := range p.dirs {
			// The mean is a constant shift, which neither PSI nor KS sees.
			out[k+1][j] = dot64(w, v)
		}
	}
	return out
}

// psi is the population stability index of cur against ref over bins cut at
// ref's deciles, with +1 added to every bin count so an empty bin does not
// make it infinite: Σ (c−r)·ln(c/r) over bin shares.
func psi(ref, cur []float64, bins int) float64 {
	if len(ref) == 0 || len(cur) == 0 {
		return 0
	}
	sorted := slices.Clone(ref)
	slices.Sort(sorted)
	cuts := make([]float64, bins-1)
	for i := range cuts {
		cuts[i] = quantile(sorted, float64(i+1)/float64(bins))
	}
	count := func(xs []float64) []float64 {
		c := make([]float64, bins)
		for i := range c {
			c[i] = 1
		}
		for _, x := range xs {
			b, _ := slices.BinarySearch(cuts, x)
			c[b]++
		}
		total := float64(len(xs) + bins)
		for i := range c {
			c[i] /= total
		}
		return c
	}
	r, c := count(ref), count(cur)
	var s float64
	for i := range r {
		s += (c[i] - r[i]) * math.Log(c[i]/r[i])
	}
	return s
}

// ks returns the two-sample Kolmogorov–Smirnov statistic D and its
// asymptotic p-value (Kolmogorov distribution with Stephens' small-sample
// correction, as in Numerical Recipes' kstwo).
func ks(a, b []float64) (d, p float64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, 1
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		v := min(x[i], y[j])
		for i < len(x) && x[i] <= v {
			i++
		}
		for j < len(y) && y[j] <= v {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(x))-float64(j)/float64(len(y))))
	}
	ne := float64(len(x)) * float64(len(y)) / float64(len(x)+len(y))
	sq := math.Sqrt(ne)
	return d, kolmogorovQ((sq + 0.12 + 0.11/sq) * d)
}

// kolmogorovQ is P(K > lambda) for the Kolmogorov distribution.
func kolmogorovQ(lambda float64) float64 {
	if lambda < 0.2 {
		return 1
	}
	var sum float64
	sign := 1.0
	for k := 1; k <= 100; k++ {
		term := sign * 2 * math.Exp(-2*float64(k*k)*lambda*lambda)
		sum += term
		if math.Abs(term) < 1e-12 {
			break
		}
		sign = -sign
	}
	return math.Min(1, math.Max(0, sum))
}

// bonferroni corrects the smallest of m p-values for m tests.
func bonferroni(ps []float64) float64 {
	if len(ps) == 0 {
		return 1
	}
	return math.Min(1, slices.Min(ps)*float64(len(ps)))
}
