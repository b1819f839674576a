package sink

import (
	"fmt"
	"strings"

	"github.com/pgvector/pgvector-go"
)

// VectorType is how an index stores and indexes its vectors. It is fixed
// when the index is created (indexes.vector_type); changing it means
// building a new index (ragsync reindex --to NAME --index-type T).
type VectorType string

const (
	// TypeVector stores each vector as vector (4 bytes a dimension) and
	// builds the HNSW index on vector(D) with cosine distance: up to 2,000
	// dimensions, pgvector's HNSW limit for vector.
	TypeVector VectorType = "vector"
	// TypeHalfvec stores each vector as halfvec (2 bytes a dimension, in
	// chunks.embedding_half) and builds the HNSW index on halfvec(D): up to
	// 4,000 dimensions. Search ranks by the half-precision vectors; the
	// embedding cache keeps full precision.
	TypeHalfvec VectorType = "halfvec"
	// TypeBit stores the full vector once (vector column) and builds the
	// HNSW index on binary_quantize(embedding)::bit(D) with Hamming
	// distance: a search takes Config.Candidates nearest by the bit index
	// and re-ranks them by cosine on the full vectors. Up to 16,000
	// dimensions, the vector type's storage limit.
	TypeBit VectorType = "bit"
)

// VectorTypes are the vector types, in the order they are documented.
var VectorTypes = []VectorType{TypeVector, TypeHalfvec, TypeBit}

// typeSpec is everything that differs between the vector types, so that
// no other code switches on a type.
type typeSpec struct {
	// maxDims is MaxDimensionsFor; needs07 is whether the type needs
	// pgvector 0.7 (halfvec, binary_quantize and their operator classes).
	maxDims int
	needs07 bool
	// column is the chunks column holding the index's vectors, of SQL type
	// columnType.
	column, columnType string
	// store is the stored value of a vector expression; read the full
	// precision vector of a stored column expression.
	store, read func(v string) string
	// encode is a vector as a COPY into column sends it.
	encode func(v []float32) any
	// index is the HNSW index's expression over a stored column, query the
	// query vector (a vector parameter) as its operator takes it; opClass
	// and distOp are its operator class and distance operator.
	index, query    func(v string, dims int) string
	opClass, distOp string
	// rerank says the HNSW index only yields candidates, re-ranked by
	// cosine distance on the full vectors.
	rerank bool
}

var typeSpecs = map[VectorType]typeSpec{
	TypeVector: {
		maxDims: 2000, column: "embedding", columnType: "vector",
		store:   func(v string) string { return v },
		read:    func(v string) string { return v },
		encode:  func(v []float32) any { return pgvector.NewVector(v) },
		index:   func(v string, d int) string { return fmt.Sprintf("%s::vector(%d)", v, d) },
		query:   func(p string, d int) string { return fmt.Sprintf("%s::vector(%d)", p, d) },
		opClass: "vector_cosine_ops", distOp: "<=>",
	},
	TypeHalfvec: {
		maxDims: 4000, needs07: true, column: halfColumn, columnType: "halfvec",
		store:   func(v string) string { return v + "::halfvec" },
		read:    func(v string) string { return v + "::vector" },
		encode:  func(v []float32) any { return pgvector.NewHalfVector(v) },
		index:   func(v string, d int) string { return fmt.Sprintf("%s::halfvec(%d)", v, d) },
		query:   func(p string, d int) string { return fmt.Sprintf("%s::halfvec(%d)", p, d) },
		opClass: "halfvec_cosine_ops", distOp: "<=>",
	},
	TypeBit: {
		maxDims: 16000, needs07: true, column: "embedding", columnType: "vector",
		store:   func(v string) string { return v },
		read:    func(v string) string { return v },
		encode:  func(v []float32) any { return pgvector.NewVector(v) },
		index:   func(v string, d int) string { return fmt.Sprintf("binary_quantize(%s)::bit(%d)", v, d) },
		query:   func(p string, d int) string { return fmt.Sprintf("binary_quantize(%s::vector(%d))::bit(%d)", p, d, d) },
		opClass: "bit_hamming_ops", distOp: "<~>", rerank: true,
	},
}

// spec is t's row of typeSpecs ("" is TypeVector); ok is false for a
// type that is none of them.
func (t VectorType) spec() (typeSpec, bool) {
	if t == "" {
		t = TypeVector
	}
	x, ok := typeSpecs[t]
	return x, ok
}

// ParseVectorType reads an index_type setting: "" is TypeVector; anything
// but the three names is an error listing them.
func ParseVectorType(s string) (VectorType, error) {
	t := VectorType(s)
	if _, ok := t.spec(); ok {
		if t == "" {
			t = TypeVector
		}
		return t, nil
	}
	return "", fmt.Errorf("index_type: %q is not a vector type: set vector (up to %d dimensions), halfvec (up to %d) or bit (up to %d)",
		s, MaxDimensionsFor(TypeVector), MaxDimensionsFor(TypeHalfvec), MaxDimensionsFor(TypeBit))
}

// MaxDimensionsFor is the most dimensions an index of type t holds: 2,000
// for vector and 4,000 for halfvec (pgvector's HNSW limits), 16,000 for bit
// (the vector column's storage limit; its bit HNSW index allows 64,000).
// An unknown type allows none.
func MaxDimensionsFor(t VectorType) int {
	x, _ := t.spec()
	return x.maxDims
}

// HNSW are an index's HNSW parameters; 0 means pgvector's default (M 16,
// EfConstruction 64, EfSearch 40). M and EfConstruction are fixed when the
// index is created; EfSearch is a query-time setting (a search uses at
// least its k).
type HNSW struct {
	M, EfConstruction, EfSearch int
}

// pgvector's defaults.
const (
	defaultHNSWM              = 16
	defaultHNSWEfConstruction = 64
	defaultHNSWEfSearch       = 40
)

// WithDefaults is h with every 0 replaced by pgvector's default.
func (h HNSW) WithDefaults() HNSW {
	if h.M == 0 {
		h.M = defaultHNSWM
	}
	if h.EfConstruction == 0 {
		h.EfConstruction = defaultHNSWEfConstruction
	}
	if h.EfSearch == 0 {
		h.EfSearch = defaultHNSWEfSearch
	}
	return h
}

// MaxCandidates bounds Config.Candidates: every candidate's full vector is
// read to re-rank it.
const MaxCandidates = 10000

// DefaultCandidates is how many candidates a bit index's search re-ranks
// when Config.Candidates is 0: 15 per hit asked, at least 150, at most
// MaxCandidates. Binary quantization keeps one bit of each dimension, so
// the Hamming order is a coarse copy of the cosine order and the
// candidates buy recall back; each one costs its share of the HNSW scan
// (hnsw.ef_search is raised to the candidates) and a read of its full
// vector to re-rank it, so latency grows with them about linearly.
// Measured by bench/sizing on dense vectors of real text at 768 and 1,536
// dimensions (20,000 chunks, k 10): 100 candidates find 0.95–1.01 of what
// a vector index finds, 150 find 0.99–1.04 at 1.6–1.9× its p99, 400 find
// 1.05–1.07 at 4–5× its p99. Sparse vectors (the hashing embedder's) fare
// worse (about 0.9 with 400 at 256 dimensions): raise
// hnsw.rerank_candidates where recall matters more than latency.
func DefaultCandidates(k int) int { return min(max(15*k, 150), MaxCandidates) }

// Errors checks HNSW settings as pgvector accepts them (0 is the default
// of each), each error naming the setting and its fix. The configuration
// and OpenIndex share it.
func (h HNSW) Errors() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case h.M < 0:
		add("hnsw.m: %d must not be negative (0 means the default, %d)", h.M, defaultHNSWM)
	case h.M > 0 && (h.M < 2 || h.M > 100):
		add("hnsw.m: %d must be 2..100 (0 means the default, %d)", h.M, defaultHNSWM)
	}
	m := h.WithDefaults().M
	switch {
	case h.EfConstruction < 0:
		add("hnsw.ef_construction: %d must not be negative (0 means the default, %d)", h.EfConstruction, defaultHNSWEfConstruction)
	case h.EfConstruction > 1000:
		add("hnsw.ef_construction: %d must be at most 1000 (0 means the default, %d)", h.EfConstruction, defaultHNSWEfConstruction)
	case h.EfConstruction > 0 && h.EfConstruction < 2*m:
		add("hnsw.ef_construction: %d must be at least twice hnsw.m (%d): set it to %d or more, or lower hnsw.m", h.EfConstruction, m, 2*m)
	case h.EfConstruction == 0 && 2*m > defaultHNSWEfConstruction:
		add("hnsw.ef_construction: the default, %d, is less than twice hnsw.m (%d): set hnsw.ef_construction to %d or more",
			defaultHNSWEfConstruction, m, 2*m)
	}
	switch {
	case h.EfSearch < 0:
		add("hnsw.ef_search: %d must not be negative (0 means the default, %d)", h.EfSearch, defaultHNSWEfSearch)
	case h.EfSearch > MaxK:
		add("hnsw.ef_search: %d must be at most %d (0 means the default, %d)", h.EfSearch, MaxK, defaultHNSWEfSearch)
	}
	return errs
}

// TypeErrors checks a vector type against the dimensions and the re-rank
// candidates, naming the types that hold more dimensions. The
// configuration and OpenIndex share it.
func TypeErrors(t VectorType, dims, candidates int) []error {
	var errs []error
	if _, err := ParseVectorType(string(t)); err != nil {
		return append(errs, err)
	}
	if t == "" {
		t = TypeVector
	}
	switch limit := MaxDimensionsFor(t); {
	case dims > limit:
		var larger []string
		for _, o := range VectorTypes {
			if MaxDimensionsFor(o) > limit {
				larger = append(larger, fmt.Sprintf("%s (up to %d)", o, MaxDimensionsFor(o)))
			}
		}
		fix := "ask the model for fewer dimensions"
		if len(larger) > 0 {
			fix = "set index_type: " + strings.Join(larger, " or ") + ", or " + fix
		}
		errs = append(errs, fmt.Errorf("embedder.dimensions: %d is more than index_type %s allows (%d): %s", dims, t, limit, fix))
	case dims <= 0:
		errs = append(errs, fmt.Errorf("embedder.dimensions: %d must be 1..%d, set it to the model's output size", dims, limit))
	}
	if candidates < 0 || candidates > MaxCandidates {
		errs = append(errs, fmt.Errorf("hnsw.rerank_candidates: %d must be 0..%d (0 is the default, max(15*k, 150))", candidates, MaxCandidates))
	}
	return errs
}
