package sink

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
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
	// hnsw are the index's HNSW parameters (defaults filled in, EfSearch
	// the recorded or this handle's), candidates the recorded re-rank
	// candidates of a bit index (0: DefaultCandidates).
	hnsw       HNSW
	candidates int
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
	if cfg.Type == "" {
		cfg.Type = TypeVector
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
		hnsw:     cfg.HNSW.WithDefaults(),
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
	if s.spec().needs07 {
		if err := checkHalfvecSupport(ctx, tx, s.cfg.Type); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+s.tIndexes+" (name, model, dimensions, vector_type, hnsw_m, hnsw_ef_construction) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
		s.cfg.Index, s.cfg.Model, s.cfg.Dimensions, string(s.cfg.Type), nullIfZero(s.cfg.HNSW.M), nullIfZero(s.cfg.HNSW.EfConstruction))
	if err != nil {
		return err
	}
	cat := &Catalog{schema: s.cfg.Schema, tIndexes: s.tIndexes}
	x, _, err := cat.index(ctx, tx, s.cfg.Index)
	if err != nil {
		return err
	}
	if x.Model != s.cfg.Model || x.Dimensions != s.cfg.Dimensions {
		return fmt.Errorf("%w: index %q holds model %q with %d dimensions, config asks for model %q with %d: choose a new index name (index:) and build it with ragsync reindex --to NAME (or ragsync backfill)",
			ErrIndexMismatch, s.cfg.Index, x.Model, x.Dimensions, s.cfg.Model, s.cfg.Dimensions)
	}
	if err := s.checkBuild(x); err != nil {
		return err
	}
	if err := s.recordQuerySettings(ctx, tx, x); err != nil {
		return err
	}
	if spec := s.spec(); spec.column != "embedding" {
		if err := s.ensureColumn(ctx, tx, spec.column, spec.columnType); err != nil {
			return err
		}
	}
	if err := s.syncFullText(ctx, tx); err != nil {
		return err
	}
	// The cast fixes the dimensions the HNSW index needs while the column
	// stays untyped; the predicate keeps each index to its own rows.
	if _, err = tx.Exec(ctx, s.hnswDDL()); err != nil {
		return err
	}
	return ensureIndexView(ctx, tx, s.cfg.Schema, s.cfg.Index, s.cfg.Dimensions, s.cfg.Type)
}

// checkBuild refuses a Config that asks an existing index for another
// vector type or other build parameters than it was created with: they
// are fixed by its HNSW index, and only a new index can have others.
func (s *Store) checkBuild(x IndexInfo) error {
	asked := s.cfg.HNSW.WithDefaults()
	switch {
	case x.Type != s.cfg.Type:
		return fmt.Errorf("%w: index %q stores vectors as %s, config asks for index_type %s: the type is fixed when an index is built; build a new index with ragsync reindex --to NAME --index-type %s (then ragsync index promote NAME), or set index_type: %s",
			ErrIndexMismatch, s.cfg.Index, x.Type, s.cfg.Type, s.cfg.Type, x.Type)
	case s.cfg.HNSW.M != 0 && asked.M != x.HNSW.M, s.cfg.HNSW.EfConstruction != 0 && asked.EfConstruction != x.HNSW.EfConstruction:
		return fmt.Errorf("%w: index %q was built with hnsw.m %d and hnsw.ef_construction %d, config asks for %d and %d: they are fixed when an index is built; build a new index with ragsync reindex --to NAME --index-type %s --hnsw-m %d --hnsw-ef-construction %d, or remove them from hnsw:",
			ErrIndexMismatch, s.cfg.Index, x.HNSW.M, x.HNSW.EfConstruction, asked.M, asked.EfConstruction, x.Type, asked.M, asked.EfConstruction)
	}
	return nil
}

// recordQuerySettings records this writer's explicit ef_search and
// candidates on the index (readers take them from there) and keeps the
// resulting values for the handle's own searches.
func (s *Store) recordQuerySettings(ctx context.Context, tx pgx.Tx, x IndexInfo) error {
	if ef := s.cfg.HNSW.EfSearch; ef != 0 && ef != x.HNSW.EfSearch {
		if _, err := tx.Exec(ctx, "UPDATE "+s.tIndexes+" SET hnsw_ef_search = $2 WHERE name = $1", s.cfg.Index, ef); err != nil {
			return fmt.Errorf("record hnsw.ef_search: %w", err)
		}
		s.logger.InfoContext(ctx, "hnsw.ef_search recorded on the index", "was", x.HNSW.EfSearch, "now", ef)
		x.HNSW.EfSearch = ef
	}
	if n := s.cfg.Candidates; n != 0 && s.spec().rerank && n != x.Candidates {
		if _, err := tx.Exec(ctx, "UPDATE "+s.tIndexes+" SET rerank_candidates = $2 WHERE name = $1", s.cfg.Index, n); err != nil {
			return fmt.Errorf("record hnsw.rerank_candidates: %w", err)
		}
		s.logger.InfoContext(ctx, "hnsw.rerank_candidates recorded on the index", "was", x.Candidates, "now", n)
		x.Candidates = n
	}
	s.hnsw, s.candidates = x.HNSW, x.Candidates
	return nil
}

func nullIfZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// checkHalfvecSupport fails unless the server's pgvector has halfvec and
// binary_quantize (0.7.0 and later), naming the command that updates it.
func checkHalfvecSupport(ctx context.Context, q rowQuerier, t VectorType) error {
	var version string
	if err := q.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&version); err != nil {
		return fmt.Errorf("read the pgvector version: %w", err)
	}
	return halfvecSupport(t, version)
}

// halfvecSupport is checkHalfvecSupport's verdict on a pgvector version.
func halfvecSupport(t VectorType, version string) error {
	if versionAtLeast(version, 0, 7) {
		return nil
	}
	return fmt.Errorf("%w: index_type %s needs pgvector 0.7.0 or later, the server has %s: install a newer pgvector on the server and run ALTER EXTENSION vector UPDATE in the database (as the extension's owner or a superuser), or set index_type: vector",
		ErrInvalidConfig, t, version)
}

// versionAtLeast reports whether a pgvector version ("0.6.2", "0.8.0")
// is at least major.minor; one it cannot read is not.
func versionAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// halfColumn is the column a halfvec index stores its vectors in, and
// oneEmbedding the check that each chunk has exactly one vector.
const (
	halfColumn   = "embedding_half"
	oneEmbedding = "chunks_one_embedding"
)

// ensureColumn adds chunks.embedding_half (column, of SQL type typ) the
// first time a halfvec index is registered (under lockDDL, which register holds): the migration
// cannot name the halfvec type, which pgvector before 0.7 lacks, and a
// vector or bit index never needs the column. The column is nullable
// without a default, so adding it rewrites nothing; embedding loses its
// NOT NULL in exchange for a check that exactly one of the two is set,
// added NOT VALID: every existing row has embedding set and the new
// column NULL, so there is nothing to validate, and new rows are checked.
func (s *Store) ensureColumn(ctx context.Context, tx pgx.Tx, column, typ string) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)",
		s.tChunks, column).Scan(&exists); err != nil {
		return fmt.Errorf("look for chunks.%s: %w", column, err)
	}
	if exists {
		return nil
	}
	// The ALTER waits for every query on chunks to end, and queries wait
	// behind it: bounded, so a long query makes the first halfvec index
	// fail to open (and be retried) rather than stall every search.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "ALTER TABLE "+s.tChunks+" ADD COLUMN "+column+" "+typ+", ALTER COLUMN embedding DROP NOT NULL,"+
		" ADD CONSTRAINT "+oneEmbedding+" CHECK (num_nonnulls(embedding, "+column+") = 1) NOT VALID")
	if err != nil {
		return fmt.Errorf("add chunks.%s for %s indexes (it waits for the queries on chunks to finish; retry when they have): %w", column, s.cfg.Type, err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = DEFAULT"); err != nil {
		return err
	}
	s.logger.InfoContext(ctx, "added a vector column to chunks for the first index of its type", "column", column, "type", s.cfg.Type)
	return nil
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
// for a first load and builds it at the end), on the index's type's
// expression (hnswExpr), with the build parameters that differ from
// pgvector's defaults.
func (s *Store) hnswDDL() string {
	var with []string
	if s.hnsw.M != defaultHNSWM {
		with = append(with, fmt.Sprintf("m = %d", s.hnsw.M))
	}
	if s.hnsw.EfConstruction != defaultHNSWEfConstruction {
		with = append(with, fmt.Sprintf("ef_construction = %d", s.hnsw.EfConstruction))
	}
	params := ""
	if len(with) > 0 {
		params = " WITH (" + strings.Join(with, ", ") + ")"
	}
	return fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s USING hnsw ((%s) %s)%s WHERE index_name = %s",
		s.hnswIndexName(), s.tChunks, s.hnswExpr(""), s.spec().opClass, params, s.indexLit())
}

// spec is the index's vector type's row of typeSpecs.
func (s *Store) spec() typeSpec {
	x, _ := s.cfg.Type.spec() // validated
	return x
}

// col is the index's vector column of the chunks table aliased as table
// (empty: unqualified).
func (s *Store) col(table string) string {
	if table != "" {
		table += "."
	}
	return table + s.spec().column
}

// hnswExpr is the HNSW index's expression over the chunks table aliased
// as table (empty: unqualified): a query must order by exactly it for the
// planner to use the index. The cast fixes the dimensions the index needs
// while the columns stay untyped (indexes of every size share them).
func (s *Store) hnswExpr(table string) string { return s.spec().index(s.col(table), s.cfg.Dimensions) }

// hnswQuery is the query vector (parameter param, a vector) as the HNSW
// index's operator takes it.
func (s *Store) hnswQuery(param string) string { return s.spec().query(param, s.cfg.Dimensions) }

// vecOf is the one expression every reader of a chunk's vector uses: the
// chunk (table alias, empty for unqualified) as a full-precision vector,
// whichever column its index stores it in.
func (s *Store) vecOf(table string) string { return s.spec().read(s.col(table)) }

// vecExpr is Store.vecOf for an index of type t, over chunks aliased table.
func vecExpr(t VectorType, table string) string {
	x, _ := t.spec()
	return x.read(table + "." + x.column)
}

// vecColumn is the chunks column a write of the index sets, and
// storeVec the value written there from a vector expression v.
func (s *Store) vecColumn() string        { return s.spec().column }
func (s *Store) storeVec(v string) string { return s.spec().store(v) }

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
