package sink

import "fmt"

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

// ParseVectorType reads an index_type setting: "" is TypeVector; anything
// but the three names is an error listing them.
func ParseVectorType(s string) (VectorType, error) {
	switch t := VectorType(s); t {
	case "":
		return TypeVector, nil
	case TypeVector, TypeHalfvec, TypeBit:
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
	switch t {
	case TypeVector, "":
		return 2000
	case TypeHalfvec:
		return 4000
	case TypeBit:
		return 16000
	}
	return 0
}

// needsHalfvec reports whether t needs pgvector 0.7's halfvec, bit
// quantization and their operator classes.
func (t VectorType) needsHalfvec() bool { return t == TypeHalfvec || t == TypeBit }

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
// when Config.Candidates is 0: 40 per hit asked, at least 400, at most
// MaxCandidates. Binary quantization keeps one bit of each dimension, so
// the Hamming order is a coarse copy of the cosine order, and the
// candidates are what buys recall back: re-ranking reads each candidate's
// full vector (400 of 3,072 dimensions are about 5 MB), far cheaper than
// the recall lost below it. Measured on the hashing embedder's vectors
// (sparse, a hard case for quantization) the top 10 finds the exact
// top 1 always and about 0.9 of the exact top 10 at 256 dimensions;
// raise hnsw.rerank_candidates where recall matters more than latency.
func DefaultCandidates(k int) int { return min(max(40*k, 400), MaxCandidates) }

// errors of HNSW settings, each naming the setting.
func (h HNSW) errors() []error {
	var errs []error
	if h.M != 0 && (h.M < 2 || h.M > 100) {
		errs = append(errs, fmt.Errorf("hnsw.m: %d must be 2..100 (0 is pgvector's default, 16)", h.M))
	}
	if h.EfConstruction != 0 && (h.EfConstruction < 4 || h.EfConstruction > 1000) {
		errs = append(errs, fmt.Errorf("hnsw.ef_construction: %d must be 4..1000 (0 is pgvector's default, 64)", h.EfConstruction))
	}
	if r := h.WithDefaults(); h.EfConstruction != 0 && r.EfConstruction < 2*r.M {
		errs = append(errs, fmt.Errorf("hnsw.ef_construction: %d must be at least twice hnsw.m (%d)", r.EfConstruction, r.M))
	}
	if h.EfSearch != 0 && (h.EfSearch < 1 || h.EfSearch > MaxK) {
		errs = append(errs, fmt.Errorf("hnsw.ef_search: %d must be 1..%d (0 is pgvector's default, 40)", h.EfSearch, MaxK))
	}
	return errs
}

// typeErrors checks the vector type against the dimensions.
func typeErrors(t VectorType, dims, candidates int) []error {
	var errs []error
	if _, err := ParseVectorType(string(t)); err != nil {
		return append(errs, err)
	}
	if t == "" {
		t = TypeVector
	}
	if limit := MaxDimensionsFor(t); dims > limit {
		switch t {
		case TypeVector:
			errs = append(errs, fmt.Errorf("embedder.dimensions: %d is more than index_type vector allows (%d): set index_type: halfvec (up to %d) or bit (up to %d), or ask the model for fewer dimensions",
				dims, limit, MaxDimensionsFor(TypeHalfvec), MaxDimensionsFor(TypeBit)))
		case TypeHalfvec:
			errs = append(errs, fmt.Errorf("embedder.dimensions: %d is more than index_type halfvec allows (%d): set index_type: bit (up to %d), or ask the model for fewer dimensions",
				dims, limit, MaxDimensionsFor(TypeBit)))
		default:
			errs = append(errs, fmt.Errorf("embedder.dimensions: %d is more than index_type %s allows (%d): ask the model for fewer dimensions", dims, t, limit))
		}
	} else if dims <= 0 {
		errs = append(errs, fmt.Errorf("embedder.dimensions: %d must be 1..%d, set it to the model's output size", dims, limit))
	}
	if candidates < 0 || candidates > MaxCandidates {
		errs = append(errs, fmt.Errorf("hnsw.rerank_candidates: %d must be 0..%d (0 is the default, max(40*k, 400))", candidates, MaxCandidates))
	}
	return errs
}
