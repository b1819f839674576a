package sink

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/migrations"
)

// MaxDimensions is the largest vector size pgvector's HNSW index accepts for
// the vector type (TypeVector); see MaxDimensionsFor for the others.
const MaxDimensions = 2000

var indexNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// Config configures OpenIndex.
type Config struct {
	// Mode says what the handle may do: Read, Write or Bulk. Required.
	Mode Mode
	// Schema is the Postgres schema holding ragsync's tables (migrated by
	// migrations.Up). Defaults to "ragsync".
	Schema string
	// Index names this index, or an alias whose target is opened; it must
	// match [a-z][a-z0-9_]{0,40} because it is spliced into the HNSW
	// index's name and predicate. Required.
	Index string
	// Model is the embedding model whose vectors the index holds. Required
	// to create an index; ignored for an alias's target and in Read mode,
	// which take the index's recorded identity.
	Model string
	// Dimensions is the model's output size, 1 to MaxDimensionsFor(Type);
	// as Model.
	Dimensions int
	// Type is a new index's vector type ("" is TypeVector). An existing
	// index keeps the type it was created with: a Config asking another
	// (non-empty) one fails with ErrIndexMismatch naming ragsync reindex.
	// Ignored for an alias's target and in Read mode, like Model.
	Type VectorType
	// HNSW are a new index's HNSW parameters. M and EfConstruction are
	// fixed when the index is created: an explicit different value for an
	// existing index fails with ErrIndexMismatch naming ragsync reindex.
	// EfSearch is a query-time setting: a writer's explicit value is
	// recorded on the index at open, and searches use the recorded value
	// (raised to k when k is larger); a reader's explicit value applies to
	// its own handle only.
	HNSW HNSW
	// Candidates is, for a bit index, how many candidates the bit index
	// yields for re-ranking by cosine on the full vectors (0 is
	// DefaultCandidates(k)). Recorded and read like HNSW.EfSearch; ignored
	// by the other types.
	Candidates int
	// Create lets Write and Bulk register a new index in a schema that
	// holds other indexes or aliases (see OpenIndex).
	Create bool
	// KeepFullText opens an existing index with the full-text setting it
	// records, ignoring SkipFullText: a writer that does not own the
	// index's settings (a shadow of a blue/green re-index) never switches
	// them.
	KeepFullText bool
	// Physical says Index names an index, never an alias: a shadow of a
	// blue/green re-index is opened by its own name, which an alias may
	// carry too (after a promote, the retired index that still follows).
	Physical bool
	// SkipFullText leaves the chunks' tsvector column empty (NULL) and
	// makes SearchText fail with ErrFullTextOff: the column and its GIN
	// index cost about a quarter more Postgres CPU per chunk, and only the
	// front door's degraded full-text answers read them. Opening a store
	// with full text on (the default) after one wrote with it off fills
	// the missing values first. Every process writing to one index must
	// agree. Defaults to false (full text written).
	SkipFullText bool
	// GroupDocuments is how many documents concurrent Upserts may write in
	// one transaction (see groupCommit); 1 writes each document alone.
	// Defaults to 32.
	GroupDocuments int
	// Groups caps the group transactions writing at once. Defaults to half
	// the pool's connections (at least 1), leaving the rest to the reads
	// before a write and to queries.
	Groups int
	// Chunker is the fingerprint of the writer's chunker settings
	// (chunker.Config.Fingerprint). A writer records it on the index, and
	// one that finds another recorded reports the change (see
	// Store.ChunkerChange). Empty: not recorded (a reader, or a writer
	// that does not chunk).
	Chunker string
	// Logger receives start-up messages. Defaults to discarding.
	Logger *slog.Logger
	// Registerer receives the sink's metrics (ragsync_sink_edit_similarity).
	// Nil registers nothing.
	Registerer prometheus.Registerer

	// alias is the configured name when Index was an alias (Identity).
	alias string
}

// defaultGroupDocuments caps a group transaction: at 32 documents of 4 KB
// a group holds about 130 chunk rows and their vectors in one batch.
const defaultGroupDocuments = 32

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = "ragsync"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.GroupDocuments == 0 {
		c.GroupDocuments = defaultGroupDocuments
	}
	return c
}

// validateName checks the schema and index name, before anything is read.
func (c Config) validateName() error {
	if errs := c.nameErrors(); len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

func (c Config) nameErrors() []error {
	var errs []error
	if err := migrations.ValidSchema(c.Schema); err != nil {
		errs = append(errs, fmt.Errorf("postgres.schema: %w", err))
	}
	if !indexNameRE.MatchString(c.Index) {
		errs = append(errs, fmt.Errorf("index: %q must match [a-z][a-z0-9_]{0,40}, e.g. articles", c.Index))
	}
	return errs
}

func (c Config) validate() error {
	errs := c.nameErrors()
	if c.Model == "" {
		errs = append(errs, errors.New("embedder.model: required, set it to the embedding model's name"))
	}
	if c.GroupDocuments < 1 || c.Groups < 0 {
		errs = append(errs, fmt.Errorf("group documents %d and groups %d: want at least 1 document per group and no negative group count", c.GroupDocuments, c.Groups))
	}
	errs = append(errs, TypeErrors(c.Type, c.Dimensions, c.Candidates)...)
	errs = append(errs, c.HNSW.Errors()...)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}
