package sink

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is one opened ragsync index in Postgres (see OpenIndex, the one
// way to get one): it carries the index's identity and, unless opened
// read-only, implements the pipeline's whole write contract. It is safe
// for concurrent use; writes to one document serialize on that document's
// row lock. The Store does not own the pool: the caller closes it after
// the last call.
type Store struct {
	pool    *pgxpool.Pool
	cfg     Config
	logger  *slog.Logger
	metrics *metrics

	// Schema-qualified table names, so the Store works whatever the pool's
	// search_path is.
	tIndexes, tDocs, tChunks, tCache, tTruncs string
	// vecType is "vector(D)": queries cast with exactly the HNSW index's
	// expression so the planner can use it.
	vecType string
	// truncatePageRows overrides truncatePageRows (tests page small tables).
	truncatePageRows int
	// group lets concurrent Upserts share a transaction; nil writes each
	// document alone. lookups lets concurrent Lookups share a round trip.
	group   *groupCommit
	lookups *lookupGroup
	// tenancy is whether the index holds tenant documents (checkTenant).
	tenancy tenancy
	// mode is Read or Write, as opened; bulk is the bulk load in progress
	// (Bulk mode until Finish), nil otherwise.
	mode Mode
	bulk atomic.Pointer[bulkLoad]
	// chunkerChange is the chunker fingerprint this writer replaced on
	// the index at open (recordChunker); nil when it found none, or its
	// own.
	chunkerChange *chunkerChange
	// marksWatch is the one listening connection of WaitAfter's readers,
	// made at the first wait.
	watchOnce  sync.Once
	marksWatch *markWatch
}

// newStore checks cfg and builds a Store without a pool or any I/O.
func newStore(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := func(table string) string { return pgx.Identifier{cfg.Schema, table}.Sanitize() }
	s := &Store{
		cfg:      cfg,
		logger:   cfg.Logger.With("stage", "sink", "index", cfg.Index),
		tIndexes: q("indexes"),
		tDocs:    q("documents"),
		tChunks:  q("chunks"),
		tCache:   q("embedding_cache"),
		tTruncs:  q("truncations"),
		vecType:  fmt.Sprintf("vector(%d)", cfg.Dimensions),
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", cfg.Index, err)
	}
	s.metrics = m
	return s, nil
}

func (s *Store) register(ctx context.Context, tx pgx.Tx) error {
	// Two processes opening the same new index would race on CREATE INDEX
	// IF NOT EXISTS (the loser fails on pg_class's unique index); a bulk
	// load building the HNSW index holds the same lock, so a serve
	// starting meanwhile waits for the build and then finds it.
	if err := lockDDL(ctx, tx, s.cfg.Schema); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+s.tIndexes+" (name, model, dimensions) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
		s.cfg.Index, s.cfg.Model, s.cfg.Dimensions)
	if err != nil {
		return err
	}
	var model string
	var dims int
	if err := tx.QueryRow(ctx, "SELECT model, dimensions FROM "+s.tIndexes+" WHERE name = $1", s.cfg.Index).Scan(&model, &dims); err != nil {
		return err
	}
	if model != s.cfg.Model || dims != s.cfg.Dimensions {
		return fmt.Errorf("%w: index %q holds model %q with %d dimensions, config asks for model %q with %d: choose a new index name (index:) and build it with ragsync reindex --to NAME (or ragsync backfill)",
			ErrIndexMismatch, s.cfg.Index, model, dims, s.cfg.Model, s.cfg.Dimensions)
	}
	if err := s.syncFullText(ctx, tx); err != nil {
		return err
	}
	// The cast fixes the dimensions the HNSW index needs while the column
	// stays untyped; the predicate keeps each index to its own rows.
	if _, err = tx.Exec(ctx, s.hnswDDL()); err != nil {
		return err
	}
	return ensureIndexView(ctx, tx, s.cfg.Schema, s.cfg.Index, s.cfg.Dimensions)
}

// syncFullText records whether this store writes full text. Switching it
// on after chunks were written with it off fills their tsvectors first
// (one UPDATE over the index's chunks that lack one), so SearchText finds
// every chunk; under the registration lock, so two starting processes do
// it once.
func (s *Store) syncFullText(ctx context.Context, tx pgx.Tx) error {
	var was bool
	if err := tx.QueryRow(ctx, "SELECT full_text FROM "+s.tIndexes+" WHERE name = $1", s.cfg.Index).Scan(&was); err != nil {
		return fmt.Errorf("read full-text state: %w", err)
	}
	on := !s.cfg.SkipFullText
	if on && !was {
		tag, err := tx.Exec(ctx, "UPDATE "+s.tChunks+" SET tsv = to_tsvector('simple'::regconfig, text)"+
			" WHERE index_name = $1 AND tsv IS NULL", s.cfg.Index)
		if err != nil {
			return fmt.Errorf("fill full text: %w", err)
		}
		s.logger.InfoContext(ctx, "full text switched on: filled the chunks written without it", "chunks", tag.RowsAffected())
	}
	if on != was {
		if _, err := tx.Exec(ctx, "UPDATE "+s.tIndexes+" SET full_text = $2 WHERE name = $1", s.cfg.Index, on); err != nil {
			return fmt.Errorf("record full-text state: %w", err)
		}
	}
	return nil
}

// hnswDDL creates the index's HNSW index if it is missing (Bulk drops it
// for a first load and builds it at the end).
func (s *Store) hnswDDL() string {
	return fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s USING hnsw ((embedding::%s) vector_cosine_ops) WHERE index_name = %s",
		s.hnswIndexName(), s.tChunks, s.vecType, s.indexLit())
}

// hnswIndexName is the per-index HNSW index; Index is validated, so it needs
// no quoting.
func (s *Store) hnswIndexName() string { return "chunks_hnsw_" + s.cfg.Index }

// indexLit is the index name as an SQL literal. Queries spell the partial
// index's predicate with this literal, not a parameter, because the planner
// proves "index_name = 'x'" implies the index predicate only for constants
// (a generic plan with $1 would never use the HNSW index).
func (s *Store) indexLit() string { return "'" + s.cfg.Index + "'" }

func lockKey(parts ...string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(strings.Join(parts, "\x00")))
	return int64(h.Sum64())
}
