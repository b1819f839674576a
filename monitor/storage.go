package monitor

import (
	"fmt"
	"slices"

	"github.com/x448/float16"

	"github.com/ragsync/ragsync/sink"
)

// StorageError is, on the fidelity signals of an index that does not
// store its vectors as float32 (index_type halfvec or bit), how much of the
// measured cosine distance the index's storage accounts for on its own: a
// score near it is the storage's error, not a model that moved.
type StorageError struct {
	// VectorType is the index's type (halfvec or bit).
	VectorType string `json:"vector_type"`
	// P50 and Max are cosine distances between each fresh provider vector
	// and that vector as the index stores it: rounded to half precision
	// for halfvec; 0 for bit, whose index stores the full vector beside
	// its bit index and re-ranks on it.
	P50 float64 `json:"p50"`
	Max float64 `json:"max"`
	// Note says what the numbers cover and what they do not.
	Note string `json:"note"`
}

// Notes of StorageError, one per type.
const (
	noteHalfvec = "halfvec stores each component at half precision: p50 and max are the cosine distances between the fresh vectors and their half-precision rounding, the part of the score due to storage"
	noteBit     = "bit stores the full vector and re-ranks the bit index's candidates on it: the storage adds no distance; the bit index's own error shows in recall (answers it misses), which the monitor does not measure"
)

// HalfRound is v as a halfvec column stores it: each component rounded to
// the nearest half-precision float, ties to even, as pgvector's cast to
// halfvec rounds.
func HalfRound(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float16.Fromfloat32(x).Float32()
	}
	return out
}

// stored is v as an index of type t holds it.
func stored(t sink.VectorType, v []float32) []float32 {
	if t == sink.TypeHalfvec {
		return HalfRound(v)
	}
	return v
}

// storageError measures the storage's part of the distances of fresh
// vectors; nil for a vector index (float32 storage adds none, as it
// always did, and its events stay as they were).
func storageError(t sink.VectorType, fresh [][]float32) *StorageError {
	switch t {
	case sink.TypeHalfvec:
		ds := make([]float64, len(fresh))
		for i, v := range fresh {
			ds[i] = CosineDistance(v, HalfRound(v))
		}
		slices.Sort(ds)
		se := &StorageError{VectorType: string(t), Note: noteHalfvec}
		if len(ds) > 0 {
			se.P50, se.Max = quantile(ds, 0.5), ds[len(ds)-1]
		}
		return se
	case sink.TypeBit:
		return &StorageError{VectorType: string(t), Note: noteBit}
	}
	return nil
}

// String is the line the monitor commands print under a fidelity signal
// of a halfvec or bit index.
func (s StorageError) String() string {
	if s.VectorType == string(sink.TypeBit) {
		return "storage (bit): exact, 0 of the distance (the full vector is stored and re-ranks the bit index's candidates); the bit index's error shows in recall, which the monitor does not measure"
	}
	return fmt.Sprintf("storage (%s): p50 %.3g, max %.3g of the cosine distance is the half-precision rounding itself", s.VectorType, s.P50, s.Max)
}
