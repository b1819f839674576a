package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgvector/pgvector-go"
	"github.com/ragsync/ragsync/internal/vector"
)

// MaxK is the most hits one search returns (pgvector's hnsw.ef_search
// ceiling).
const MaxK = 1000

// Query narrows a search. Only live documents are ever searched.
type Query struct {
	// K is how many hits to return at most, 1..MaxK. Defaults to 10.
	K int
	// Tenant, when set, keeps documents of that tenant only. Empty on an
	// index that holds documents with a tenant is refused with
	// ErrTenantRequired, unless AllTenants is set; on an index without
	// tenants it searches every document.
	Tenant string
	// AllTenants searches every tenant's documents on purpose (an
	// operator's query). Front doors never set it.
	AllTenants bool
	// Filter, when set, keeps documents whose metadata contains it (jsonb
	// @>), e.g. {"lang": "en"}.
	Filter map[string]any
	// Table, when set, keeps documents of that source table only.
	Table string
	// DocID, when set, keeps the chunks of that one document (an id as
	// DocID builds it), so the K hits are the best of that document rather
	// than whatever of it made the global top K.
	DocID string
}

// Hit is one matching chunk.
type Hit struct {
	DocID, Table, Key string
	Position          int
	Text              string
	// Score is 1 - cosine distance for Search (1 is identical direction)
	// and ts_rank for SearchText; higher is better.
	Score    float64
	Metadata map[string]any
	// Reused says the chunk stands on a vector computed from a
	// near-duplicate text that is not yet repaid (reuse debt): words the
	// edit brought are not in it until the repayment replaces it.
	Reused bool

	// The chunk's provenance: where its text and vector came from. An
	// empty string or a zero time is unknown: the row was written before
	// ragsync recorded provenance, which cannot be proven afterwards.

	// Model and Dimensions are the index's: every chunk of an index holds
	// a vector of that model (the embedding cache and the HNSW index are
	// keyed by them), so they are always known.
	Model      string
	Dimensions int
	// ModelVersion is the model name the embedding provider reported when
	// it computed the vector (it may name a dated snapshot of Model).
	ModelVersion string
	// Chunker is the fingerprint of the chunker settings that cut the
	// chunk (chunker.Config.Fingerprint, e.g. "content-defined/512/128/1024").
	Chunker string
	// Source is the change source ("pg:<system id>/<database>" or
	// "dbz:<server>/<database>"), SourcePosition the change's place in it
	// ("pg:00000000016b3f40.0000000000000232", cdc.Version.Position) and
	// CommittedAt its commit time in the source.
	Source, SourcePosition string
	CommittedAt            time.Time
	// TraceID is the trace id of the change that wrote the chunk (32 hex
	// digits).
	TraceID string
}

func (q Query) withDefaults() (Query, error) {
	if q.K == 0 {
		q.K = 10
	}
	if q.K < 0 || q.K > MaxK {
		return q, fmt.Errorf("%w: k=%d must be 1..%d", ErrInvalidQuery, q.K, MaxK)
	}
	return q, nil
}

// filters renders q's filters as SQL over documents alias d, numbering
// parameters after those already in args.
func (q Query) filters(args []any) (string, []any) {
	var b strings.Builder
	if q.Tenant != "" {
		args = append(args, q.Tenant)
		b.WriteString(" AND d.tenant = $" + strconv.Itoa(len(args)))
	}
	if len(q.Filter) > 0 {
		args = append(args, q.Filter)
		b.WriteString(" AND d.metadata @> $" + strconv.Itoa(len(args)) + "::jsonb")
	}
	if q.Table != "" {
		args = append(args, q.Table)
		b.WriteString(" AND d.source_table = $" + strconv.Itoa(len(args)))
	}
	if q.DocID != "" {
		args = append(args, q.DocID)
		b.WriteString(" AND d.id = $" + strconv.Itoa(len(args)))
	}
	return b.String(), args
}

// queryInputError marks as ErrInvalidQuery what Postgres rejected as data
// (SQLSTATE class 22: a NUL or bad byte in a filter, a malformed number):
// the caller's input is at fault and retrying it cannot succeed, so callers
// such as the front door must not count it as the database failing.
func queryInputError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return fmt.Errorf("%w: %w", ErrInvalidQuery, err)
	}
	return err
}

// Search returns the chunks nearest vec by cosine distance, best first, at
// most q.K, from live documents that pass q's filters. It runs in a
// read-only transaction that sets hnsw.ef_search ≥ K and pgvector 0.8's
// strict-order iterative scan, so filters and deleted documents do not
// starve the result below K while enough matches exist.
func (s *Store) Search(ctx context.Context, vec []float32, q Query) ([]Hit, error) {
	q, err := q.withDefaults()
	if err == nil && len(vec) != s.cfg.Dimensions {
		err = fmt.Errorf("%w: vector has %d dimensions, index %s wants %d", ErrInvalidQuery, len(vec), s.cfg.Index, s.cfg.Dimensions)
	}
	if why := vector.Unsearchable(vec); err == nil && why != "" {
		err = fmt.Errorf("%w: the query vector is %s", ErrInvalidQuery, why)
	}
	if err == nil {
		err = s.checkTenant(ctx, q)
	}
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", s.cfg.Index, err)
	}
	sql, args := s.searchSQL(vec, q)
	var hits []Hit
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('hnsw.ef_search', $1, true), set_config('hnsw.iterative_scan', 'strict_order', true)",
			strconv.Itoa(s.efSearch(q.K))); err != nil {
			return err
		}
		var err error
		hits, err = s.collectHits(ctx, tx, sql, args)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", s.cfg.Index, queryInputError(hintMigrate(err, s.cfg.Schema)))
	}
	return hits, nil
}

// searchSQL is the vector query; its ORDER BY expression and index_name
// literal are exactly the HNSW index's (hnswExpr, indexLit), or the planner
// will not use it. A bit index's query takes the candidates nearest by
// Hamming distance on the quantized vectors, with the filters applied as
// the vector query applies them (the iterative scan continues until enough
// rows pass), and re-ranks them by cosine distance on the full vectors.
func (s *Store) searchSQL(vec []float32, q Query) (string, []any) {
	filters, args := q.filters([]any{pgvector.NewVector(vec)})
	from := " FROM " + s.tChunks + " c JOIN " + s.tDocs + " d ON d.index_name = c.index_name AND d.id = c.doc_id" +
		" WHERE c.index_name = " + s.indexLit() + " AND d.deleted_at IS NULL" + filters
	// K inline: with a cached statement Postgres may switch to a generic
	// plan, and an unknown LIMIT can price the HNSW scan out.
	limit := " LIMIT " + strconv.Itoa(q.K)
	dist := "(" + s.hnswExpr("c") + " " + s.distOp() + " " + s.hnswQuery("$1") + ")"
	if s.cfg.Type != TypeBit {
		return "SELECT c.doc_id, d.source_table, d.doc_key, c.position, c.text, 1 - " + dist + ", d.metadata, c.debt_since IS NOT NULL, " + provenanceCols +
			from + " ORDER BY " + dist + limit, args
	}
	cosine := "(c.embedding::" + s.vecType + " <=> $1::" + s.vecType + ")"
	return "SELECT c.doc_id, c.source_table, c.doc_key, c.position, c.text, 1 - " + cosine + ", c.metadata, c.reused, " + provenanceCols +
		" FROM (SELECT c.doc_id, d.source_table, d.doc_key, c.position, c.text, c.embedding, d.metadata, c.debt_since IS NOT NULL AS reused, " + provenanceCols +
		from + " ORDER BY " + dist + " LIMIT " + strconv.Itoa(s.candidatesFor(q.K)) + ") c" +
		" ORDER BY " + cosine + limit, args
}

// candidatesFor is how many candidates a bit index's search of k hits
// re-ranks: the recorded (or this handle's) number, else
// DefaultCandidates; never fewer than k.
func (s *Store) candidatesFor(k int) int {
	if s.candidates > 0 {
		return max(s.candidates, k)
	}
	return DefaultCandidates(k)
}

// efSearch is the hnsw.ef_search a search of k hits sets: the index's
// (recorded, or pgvector's default), raised to k, and for a bit index to
// its candidates; at most pgvector's ceiling, past which the iterative
// scan supplies the rest.
func (s *Store) efSearch(k int) int {
	ef := max(s.hnsw.WithDefaults().EfSearch, k)
	if s.cfg.Type == TypeBit {
		ef = max(ef, s.candidatesFor(k))
	}
	return min(ef, MaxK)
}

// SearchText is the full-text fallback for degraded answers: chunks of live
// documents matching any word of text (Postgres 'simple' configuration, so
// no stemming or stop words), ranked by ts_rank, best first, at most q.K.
// Text without words returns no hits. With Config.SkipFullText it fails
// with ErrFullTextOff instead of finding nothing.
func (s *Store) SearchText(ctx context.Context, text string, q Query) ([]Hit, error) {
	q, err := q.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("search text %s: %w", s.cfg.Index, err)
	}
	if s.cfg.SkipFullText {
		return nil, fmt.Errorf("search text %s: %w (postgres.full_text is false; set it to true, and ragsync fills the index's full text on its next start)", s.cfg.Index, ErrFullTextOff)
	}
	if err := s.checkTenant(ctx, q); err != nil {
		return nil, fmt.Errorf("search text %s: %w", s.cfg.Index, err)
	}
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	filters, args := q.filters([]any{text})
	// plainto_tsquery ANDs the words; a question rarely has all of them in
	// one chunk, so the ANDs become ORs and ts_rank rewards chunks that
	// match more of them.
	sql := "SELECT c.doc_id, d.source_table, d.doc_key, c.position, c.text, ts_rank(c.tsv, tq.q), d.metadata, c.debt_since IS NOT NULL, " + provenanceCols +
		" FROM " + s.tChunks + " c JOIN " + s.tDocs + " d ON d.index_name = c.index_name AND d.id = c.doc_id," +
		" (SELECT to_tsquery('simple', replace(plainto_tsquery('simple', $1)::text, ' & ', ' | ')) AS q) tq" +
		" WHERE c.index_name = " + s.indexLit() + " AND d.deleted_at IS NULL AND c.tsv @@ tq.q" + filters +
		" ORDER BY 6 DESC, c.doc_id, c.position LIMIT " + strconv.Itoa(q.K)
	hits, err := s.collectHits(ctx, s.pool, sql, args)
	if err != nil {
		return nil, fmt.Errorf("search text %s: %w", s.cfg.Index, queryInputError(hintMigrate(err, s.cfg.Schema)))
	}
	return hits, nil
}

// provenanceCols are the chunk's provenance columns, as collectHits scans
// them after the hit's own. They are read from the chunk row the query
// already returns: no join is added, and the model and dimensions come
// from the Store (they are the index's).
const provenanceCols = "c.model_version, c.chunker, c.source, c.source_position, c.committed_at, c.trace_id"

func (s *Store) collectHits(ctx context.Context, q querier, sql string, args []any) ([]Hit, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hit, error) {
		h := Hit{Model: s.cfg.Model, Dimensions: s.cfg.Dimensions}
		// NULL (a row written before provenance was recorded) scans as
		// the zero value: unknown.
		var version, chunker, source, position, trace *string
		var committed *time.Time
		err := r.Scan(&h.DocID, &h.Table, &h.Key, &h.Position, &h.Text, &h.Score, &h.Metadata, &h.Reused,
			&version, &chunker, &source, &position, &committed, &trace)
		h.ModelVersion, h.Chunker, h.Source, h.SourcePosition, h.TraceID = deref(version), deref(chunker), deref(source), deref(position), deref(trace)
		if committed != nil {
			h.CommittedAt = *committed
		}
		return h, err
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
