package fallback

import "github.com/ragsync/ragsync/sink"

// The Searcher speaks the sink's query and hit types; the aliases keep the
// sink import in one place and the wire Hit separate from the storage one.
type (
	sinkQuery = sink.Query
	sinkHit   = sink.Hit
)

// ProvenanceOf is the provenance of a search hit as the front door and
// ragsync query --json write it.
func ProvenanceOf(h sink.Hit) Provenance {
	return Provenance{Model: h.Model, ModelVersion: h.ModelVersion, Dimensions: h.Dimensions, Chunker: h.Chunker,
		Source: h.Source, SourcePosition: h.SourcePosition, CommittedAt: h.CommittedAt, TraceID: h.TraceID}
}
