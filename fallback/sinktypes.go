package fallback

// TEMPORARY until sink builds: mirrors of sink.Query and sink.Hit with
// exactly the fields sink declares. Replaced by aliases to the sink types.

type sinkQuery struct {
	K      int
	Tenant string
	Filter map[string]any
	Table  string
}

type sinkHit struct {
	DocID, Table, Key string
	Position          int
	Text              string
	Score             float64
	Metadata          map[string]any
}
