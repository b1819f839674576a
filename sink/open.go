package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Mode is what an opened index may do (Config.Mode).
type Mode int

const (
	// Read searches and reads: nothing is registered or created, only
	// USAGE on the schema and SELECT on its tables are needed, and every
	// write of the contract (Upsert, Delete, Truncate, CacheVectors)
	// fails with ErrReadOnly.
	Read Mode = iota + 1
	// Write writes each document in a transaction of its own (or shared
	// with concurrent ones, see Config.GroupDocuments): it is durable when
	// Upsert returns, and Flush has nothing to do.
	Write
	// Bulk loads an index that holds no document yet: Upsert buffers,
	// Flush writes the buffered documents with COPY, and Finish builds the
	// HNSW index once over every row, then the handle writes as in Write
	// mode. An index that holds documents (deleted ones count: their
	// versions fence) opens in Write mode instead: Store.Mode tells.
	Bulk
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	case Bulk:
		return "bulk"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ErrReadOnly is the error of a write through an index opened in Read
// mode.
var ErrReadOnly = errors.New("index opened read-only")

// Identity is what an index was built with: every reader and writer of it
// must use the same, so the embedder is built from it, never from the
// configuration alone.
type Identity struct {
	// Name is the physical index.
	Name string
	// Alias is the configured name when it is an alias of Name, else "".
	Alias      string
	Model      string
	Dimensions int
	// FullText is whether the index's chunks carry a tsvector (text and
	// hybrid search read them).
	FullText bool
	// Type is how the index stores and indexes its vectors.
	Type VectorType
	// HNSW are its HNSW parameters, defaults filled in; EfSearch is the
	// one this handle's searches use (before raising it to k).
	HNSW HNSW
	// Candidates is how many candidates a bit index's search re-ranks; 0
	// is DefaultCandidates(k). Always 0 for the other types.
	Candidates int
}

// OpenIndex is the one way to open an index. cfg.Index is an index or an
// alias (an alias opens its target, Identity.Alias naming it; with
// cfg.Physical it is an index only); cfg.Mode says what the handle may do:
//
//   - Read opens an existing index, creating nothing and needing USAGE
//     and SELECT only. The identity (model, dimensions, full text) is the
//     index's own; cfg.Model, cfg.Dimensions and cfg.SkipFullText are
//     ignored. An unknown name is an *UnknownIndexError.
//   - Write and Bulk register the index (or check that it is registered
//     with cfg.Model and cfg.Dimensions: ErrIndexMismatch otherwise) and
//     make sure its HNSW index and SQL view (see IndexView) exist; the
//     schema must have been migrated (migrations.Up). An alias's target,
//     and an existing index opened with neither cfg.Model nor
//     cfg.Dimensions, keep their recorded identity. A name that is
//     neither an alias nor an index is registered with cfg.Model and
//     cfg.Dimensions, unless the schema holds other indexes or aliases
//     and cfg.Create is false: beside them an unknown name is far more
//     often a typo than a new index, so it is an *UnknownIndexError.
//     A new index is created with cfg.Type and cfg.HNSW; an existing one
//     keeps its own, and a cfg.Type or build parameter (HNSW.M,
//     HNSW.EfConstruction) set to another value is ErrIndexMismatch.
//
// Bulk on an index that holds documents opens it in Write mode (Store.Mode
// says which). The handle implements the pipeline's whole write contract
// in every mode, Read refusing the writes.
func OpenIndex(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	switch cfg.Mode {
	case Read:
		return openRead(ctx, pool, cfg)
	case Write, Bulk:
	default:
		return nil, fmt.Errorf("%w: mode %v: want sink.Read, sink.Write or sink.Bulk", ErrInvalidConfig, cfg.Mode)
	}
	if err := cfg.validateName(); err != nil {
		return nil, err
	}
	cat := NewCatalog(pool, cfg.Schema)
	r, found, err := cat.resolve(ctx, cfg.Index, cfg.Physical)
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", cfg.Index, err)
	}
	switch {
	case found && r.Alias != nil:
		// The target's identity, build parameters included: what the
		// configuration asks describes the index it named, which the
		// alias has moved on from.
		cfg.alias, cfg.Index, cfg.Model, cfg.Dimensions = cfg.Index, r.Index.Name, r.Index.Model, r.Index.Dimensions
		cfg.Type, cfg.HNSW.M, cfg.HNSW.EfConstruction = r.Index.Type, 0, 0
	case found && cfg.Model == "" && cfg.Dimensions == 0:
		cfg.Model, cfg.Dimensions = r.Index.Model, r.Index.Dimensions
	case !found && !cfg.Create:
		err := cat.unknown(ctx, cfg.Index)
		var unknown *UnknownIndexError
		if !errors.As(err, &unknown) || len(unknown.Known) > 0 {
			return nil, err
		}
	}
	if cfg.KeepFullText && found {
		cfg.SkipFullText = !r.Index.FullText
	}
	if found && cfg.Type == "" {
		// An existing index keeps its type; only an explicit other one is
		// refused (register).
		cfg.Type = r.Index.Type
	}
	s, err := openWrite(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == Bulk {
		b, err := s.beginBulk(ctx)
		switch {
		case errors.Is(err, ErrNotEmpty):
			s.logger.InfoContext(ctx, "index holds documents: written document by document, not bulk-loaded")
		case err != nil:
			return nil, err
		default:
			s.bulk.Store(b)
		}
	}
	return s, nil
}

// openWrite registers cfg.Index (or checks that it is registered with the
// same model and dimensions) and makes sure its HNSW index and SQL view
// exist.
func openWrite(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.mode = Write
	groups := s.cfg.Groups
	if groups == 0 {
		groups = max(1, int(pool.Config().MaxConns)/2)
	}
	s.group = newGroupCommit(groups, s.cfg.GroupDocuments)
	s.lookups = newLookupGroup(groups, s.cfg.GroupDocuments)
	// The chunker is recorded under the registration lock register takes,
	// so of two writers starting with the same new settings one reports
	// the change.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := s.register(ctx, tx); err != nil {
			return err
		}
		return s.recordChunker(ctx, tx)
	})
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", s.cfg.Index, hintMigrate(err, s.cfg.Schema))
	}
	s.reportChunkerChange(ctx)
	if err := registerChunks(s.cfg.Registerer, NewCatalog(pool, s.cfg.Schema)); err != nil {
		return nil, fmt.Errorf("open index %s: %w", s.cfg.Index, err)
	}
	s.logger.InfoContext(ctx, "index ready", "model", s.cfg.Model, "dimensions", s.cfg.Dimensions, "type", s.cfg.Type, "schema", s.cfg.Schema)
	return s, nil
}

// openRead opens an existing index for reading (see OpenIndex).
func openRead(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if err := CheckMigrated(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	cat := NewCatalog(pool, cfg.Schema)
	r, found, err := cat.resolve(ctx, cfg.Index, cfg.Physical)
	if err == nil && !found {
		err = cat.unknown(ctx, cfg.Index)
	}
	if err != nil {
		return nil, err
	}
	if r.Index.Name != cfg.Index {
		cfg.alias = cfg.Index
	}
	cfg.Index, cfg.Model, cfg.Dimensions, cfg.SkipFullText = r.Index.Name, r.Index.Model, r.Index.Dimensions, !r.Index.FullText
	cfg.Type, cfg.HNSW.M, cfg.HNSW.EfConstruction = r.Index.Type, r.Index.HNSW.M, r.Index.HNSW.EfConstruction
	// A reader searches with the recorded query settings, unless its own
	// configuration sets them (for its handle only: it records nothing).
	if cfg.HNSW.EfSearch == 0 {
		cfg.HNSW.EfSearch = r.Index.HNSW.EfSearch
	}
	if cfg.Candidates == 0 {
		cfg.Candidates = r.Index.Candidates
	}
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.mode = Read
	s.hnsw = cfg.HNSW.WithDefaults()
	if s.spec().rerank {
		s.candidates = cfg.Candidates
	}
	return s, nil
}

// resolve is Catalog.Resolve, or with physical the index of that name
// only.
func (c *Catalog) resolve(ctx context.Context, name string, physical bool) (Resolved, bool, error) {
	if !physical {
		return c.Resolve(ctx, name)
	}
	x, ok, err := c.index(ctx, c.pool, name)
	if err != nil {
		return Resolved{}, false, fmt.Errorf("resolve %s: %w", name, hintMigrate(err, c.schema))
	}
	return Resolved{Index: x}, ok, nil
}

// Identity is the index the handle opened: its name, the alias it was
// opened by, its model, dimensions and full-text setting.
func (s *Store) Identity() Identity {
	return Identity{Name: s.cfg.Index, Alias: s.cfg.alias, Model: s.cfg.Model, Dimensions: s.cfg.Dimensions, FullText: !s.cfg.SkipFullText,
		Type: s.cfg.Type, HNSW: s.hnsw, Candidates: s.candidates}
}

// Mode is what the handle does now: Bulk until Finish, then Write; Read
// for a read-only handle.
func (s *Store) Mode() Mode {
	if s.bulk.Load() != nil {
		return Bulk
	}
	return s.mode
}

// writable is nil unless the handle is read-only.
func (s *Store) writable() error {
	if s.mode == Read {
		return fmt.Errorf("%w: index %s was opened with sink.Read; open it with sink.Write or sink.Bulk to write", ErrReadOnly, s.cfg.Index)
	}
	return nil
}

// Flush makes what Upsert buffered durable: in Bulk mode the buffered
// documents, their chunks and new cache entries are written in one
// transaction with COPY; in Write and Read modes nothing is buffered and
// Flush returns nil. The pipeline calls it before it acknowledges any
// source position.
func (s *Store) Flush(ctx context.Context) error {
	if b := s.bulk.Load(); b != nil {
		return b.Flush(ctx)
	}
	return nil
}

// Finish ends a bulk load: it flushes, the handle then writes as in Write
// mode, and it builds the index's HNSW index over every row with opts.
// Outside Bulk mode it does nothing.
func (s *Store) Finish(ctx context.Context, opts BuildOptions) error {
	b := s.bulk.Load()
	if b == nil {
		return nil
	}
	if err := b.Flush(ctx); err != nil {
		return err // still buffered: a later Flush or Finish retries
	}
	// Everything is written: what follows goes document by document, even
	// if the build fails (serve builds a missing HNSW index at start).
	s.bulk.Store(nil)
	if err := b.build(ctx, opts); err != nil {
		return err
	}
	s.analyze(ctx)
	return nil
}

// analyze gathers the planner's statistics of the chunks and documents
// tables after a bulk load. Until then the planner knows nothing of the
// rows just loaded (autovacuum analyzes them only a while later, or never
// where it is off), and a search can plan a sort of every chunk of the
// index instead of its HNSW scan: right answers, at the cost of an exact
// scan per query, just when a reindex is promoted. ANALYZE reads a sample
// of fixed size whatever the tables hold and blocks no reader or writer. A
// failure (a role that does not own the tables) is logged: the load is
// done, and autovacuum or an administrator's ANALYZE does the same later.
func (s *Store) analyze(ctx context.Context) {
	if _, err := s.pool.Exec(ctx, "ANALYZE "+s.tChunks+", "+s.tDocs); err != nil {
		s.logger.WarnContext(ctx, "bulk load: could not gather the planner's statistics; searches may scan every chunk until autovacuum analyzes the tables (or run ANALYZE on them)",
			"error", err)
	}
}
