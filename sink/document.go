package sink

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// Chunk is one piece of a document's text as the chunker cut it.
type Chunk struct {
	// Position is the chunk's 0-based place in the document; unique per
	// document.
	Position int
	// Hash is the chunk's normalised content hash; equal hashes mean equal
	// text, which is what lets the sink keep, move or reuse chunks.
	Hash   string
	Text   string
	Tokens int
	// Vector is the chunk's embedding with exactly Config.Dimensions
	// values. Nil means the vector is already known: Upsert takes it from
	// the embedding cache (see Store.Vectors) and fails with
	// ErrMissingVector if it is not there.
	Vector []float32
	// VectorHash, when set with a nil Vector, is the content hash of
	// another text whose cached vector this chunk reuses (near-duplicate
	// reuse, see pipeline.ReuseConfig): Upsert takes the vector cached under
	// VectorHash instead of Hash and records VectorHash on the row as the
	// vector's origin. Empty means Hash: the vector is the chunk's own. It
	// must be empty or equal to Hash when Vector is set.
	VectorHash string
	// DebtSince, DebtDistance and DebtNewWords describe the debt of a
	// reused vector (VectorHash ≠ Hash), which the row keeps until the
	// debt is repaid (Store.RepayDebt): when the chunk first stood on a
	// borrowed vector, the cosine distance predicted for it, and whether
	// the text has words the origin lacks. Ignored for a chunk's own
	// vector; a zero DebtSince on a reused one means the commit time.
	DebtSince    time.Time
	DebtDistance float64
	DebtNewWords bool
}

// vectorKey is the cache key of the chunk's vector.
func (c Chunk) vectorKey() string {
	if c.VectorHash != "" {
		return c.VectorHash
	}
	return c.Hash
}

// Document is the full new state of one source document.
type Document struct {
	// ID is DocID(Table, Key); left empty, Upsert derives it.
	ID string
	// Table is the source "schema.table" and Key the document's key within
	// it; both required.
	Table, Key string
	// Version orders the changes of this document; required (non-zero).
	Version  cdc.Version
	SourceTS time.Time
	// Metadata is matched by Query.Filter (jsonb containment).
	Metadata map[string]any
	// Tenant, when not empty, is matched by Query.Tenant.
	Tenant string
	// Row is the source row image, stored for re-chunking and inspection.
	Row    map[string]any
	Chunks []Chunk

	// Fuzzy is the ssdeep hash of the document's normalised text
	// (chunker.FuzzyHash), stored for `ragsync dupes`; empty when not
	// computed (dupes hashes such texts itself) or the text is under
	// ssdeep's minimum.
	Fuzzy string
	// EditSimilarity is how similar this version is to the stored one,
	// 0 (rewritten) to 100 (same), measured by EditMethod (the pipeline's
	// is "words", see chunker.ChunkEditSimilarity). An empty EditMethod
	// means not measured (a create): nothing is recorded.
	EditSimilarity int
	EditMethod     string

	// RenderHash is a hash of the chunker fingerprint and the rendered
	// text (the pipeline's), stored on the document row: an update with
	// the same hash cuts the same chunks. Empty: not known (never matches).
	RenderHash string
	// MetadataOnly says the text is unchanged: RenderHash equals the
	// stored one, and Chunks is empty. Upsert then writes the document row
	// alone (version, metadata, tenant, row), fenced by the version like
	// any write, provided that under the row lock the stored row is live
	// and its render hash still equals RenderHash; otherwise it writes
	// nothing and returns Outcome.TextChanged, and the caller writes the
	// whole document. No chunk row and no vector is touched.
	MetadataOnly bool
	// Provenance is recorded on every chunk row this write inserts (kept
	// and moved chunks keep the provenance of the change that wrote them).
	// The source, position and commit time come from Version.
	Provenance Provenance

	// StoredKeys, when set, are the vector keys (Chunk.VectorHash, else
	// Hash) of the chunks the caller read as this document's stored ones
	// before the write (Lookup.Chunks). Upsert does not probe the cache
	// for them with the read that opens its transaction: such chunks are
	// almost always kept, not inserted. One that is inserted after all is
	// looked up and locked under the row lock like any other, so a list
	// gone stale (a concurrent writer) costs a round trip, never a check.
	StoredKeys []string
}

// Provenance is what a write records on the chunk rows it inserts, beside
// the source, position and commit time of its Version. The model and the
// dimensions are the index's.
type Provenance struct {
	// ModelVersion is the model name the provider reported for the vectors
	// this write embedded; empty: unknown. A chunk whose vector came from
	// the embedding cache records the cache entry's instead.
	ModelVersion string
	// Chunker is the chunker fingerprint (chunker.Config.Fingerprint).
	Chunker string
	// TraceID is the change's trace id (32 hex digits); empty: none.
	TraceID string
}

// Outcome says what a write did. Exactly one of Applied, Stale,
// Duplicate and TextChanged is true after a successful call; the counts are chunk rows and
// are zero unless Applied.
type Outcome struct {
	// Applied: the change was newer than what was stored and is written.
	Applied bool
	// Stale: a newer version is stored; nothing was written.
	Stale bool
	// Duplicate: this version is stored already; nothing was written.
	Duplicate bool

	Inserted  int // chunks with new content, written with their vectors
	Moved     int // chunks whose content moved to another position
	Unchanged int // chunks left untouched
	Removed   int // chunks whose content vanished, deleted

	// TextChanged: a MetadataOnly write found, under the row lock, that
	// the stored document is absent, deleted or rendered from another
	// text; nothing was written and none of Applied, Stale and Duplicate
	// is set. The caller writes the whole document instead.
	TextChanged bool
	// MetadataOnly: the write was applied as a metadata-only update.
	MetadataOnly bool

	edited bool // an update whose edit magnitude was recorded
}

// DocID is the document id the sink stores: table + "/" + key. Table is a
// cdc.TableName, which escapes "/" (and keeps "schema.table" unambiguous),
// so the first "/" ends the table and two (table, key) pairs never share an
// id; the key may hold "/" (composite keys escape theirs).
func DocID(table, key string) string { return table + "/" + key }

// badTable reports a table name that would make DocID ambiguous.
func badTable(table string) bool { return strings.Contains(table, "/") }

func (s *Store) checkDocument(id string, d Document) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidDocument, fmt.Sprintf(format, args...))
	}
	switch {
	case d.Table == "" || d.Key == "":
		return bad("table and key are required")
	case badTable(d.Table):
		return bad("table %q holds a \"/\": build it with cdc.TableName", d.Table)
	case id != DocID(d.Table, d.Key):
		return bad("id %q is not table/key %q", id, DocID(d.Table, d.Key))
	case d.Version.IsZero():
		return bad("version is zero: every change needs a source version for fencing")
	case d.MetadataOnly && (d.RenderHash == "" || len(d.Chunks) > 0):
		return bad("a metadata-only write needs the render hash it was decided by, and no chunks")
	}
	if d.EditMethod != "" && (d.EditSimilarity < 0 || d.EditSimilarity > 100) {
		return bad("edit similarity %d is outside 0..100", d.EditSimilarity)
	}
	seen := make(map[int]bool, len(d.Chunks))
	for i, c := range d.Chunks {
		switch {
		case c.Position < 0 || seen[c.Position]:
			return bad("chunk %d: position %d is negative or repeated", i, c.Position)
		case c.Hash == "":
			return bad("chunk %d: empty content hash", i)
		case c.Vector != nil && c.VectorHash != "" && c.VectorHash != c.Hash:
			return bad("chunk %d: both a vector and a reused vector hash", i)
		case c.Vector != nil && len(c.Vector) != s.cfg.Dimensions:
			return bad("chunk %d: vector has %d dimensions, index %s wants %d", i, len(c.Vector), s.cfg.Index, s.cfg.Dimensions)
		}
		for _, f := range c.Vector {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return bad("chunk %d: vector holds NaN or Inf", i)
			}
		}
		seen[c.Position] = true
	}
	return nil
}
