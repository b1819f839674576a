package fallback

import "github.com/ragsync/ragsync/sink"

// The Searcher speaks the sink's query and hit types; the aliases keep the
// sink import in one place and the wire Hit separate from the storage one.
type (
	sinkQuery = sink.Query
	sinkHit   = sink.Hit
)
