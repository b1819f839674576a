package sink

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// debtColumnsSQL computes a new chunk row's debt columns from the unnest
// columns u.debt_since, u.debt_distance and u.debt_new_words: only a
// reused vector (vector_hash ≠ content_hash) is debt, dated by the
// pipeline (its clock, or the commit time when it gave none).
const debtColumnsSQL = "CASE WHEN u.vector_hash <> u.content_hash THEN coalesce(u.debt_since, now()) END," +
	" CASE WHEN u.vector_hash <> u.content_hash THEN u.debt_distance END," +
	" u.vector_hash <> u.content_hash AND coalesce(u.debt_new_words, false)"

// debtColumns are the debt parameters of a chunk insert, one entry a chunk.
type debtColumns struct {
	since    []*time.Time
	distance []*float32
	newWords []bool
}

func newDebtColumns(n int) debtColumns {
	return debtColumns{since: make([]*time.Time, n), distance: make([]*float32, n), newWords: make([]bool, n)}
}

func (d debtColumns) set(i int, c Chunk) {
	if c.VectorHash == "" || c.VectorHash == c.Hash {
		return
	}
	if !c.DebtSince.IsZero() {
		t := c.DebtSince
		d.since[i] = &t
	}
	if c.DebtDistance > 0 && !math.IsNaN(c.DebtDistance) {
		f := float32(c.DebtDistance)
		d.distance[i] = &f
	}
	d.newWords[i] = c.DebtNewWords
}

// Debt is one chunk standing on a reused vector.
type Debt struct {
	ChunkID int64
	DocID   string
	Hash    string
	Text    string
	Tokens  int
	// Since is when the chunk first stood on a borrowed vector.
	Since time.Time
	// Distance is the cosine distance predicted when it was reused; NaN
	// when unknown (reused before debt was recorded).
	Distance float64
	// NewWords says the text has words the vector's origin lacks.
	NewWords bool
	// Vector is the reused vector, OriginText the text it was computed
	// from (empty if the cache entry is gone): with a fresh vector of
	// Text they measure what the reuse really cost.
	Vector     []float32
	OriginText string
	// Cached says the cache holds an exact vector of Text already (another
	// document embedded the same text since): repaying it costs no call.
	Cached bool
}

// DebtSummary is an index's outstanding reuse debt.
type DebtSummary struct {
	// Vectors is the number of chunks on a reused vector and Tokens the
	// tokens it takes to re-embed them.
	Vectors int
	Tokens  int64
	// Oldest is the Since of the oldest debt; zero when there is none.
	Oldest time.Time
	// DueVectors and DueTokens count the debt dated at or before the
	// cutoff asked for (the one whose window ends first).
	DueVectors int
	DueTokens  int64
}

// OutstandingDebt sums the index's debt; due is the cutoff of
// DueVectors/DueTokens.
func (s *Store) OutstandingDebt(ctx context.Context, due time.Time) (DebtSummary, error) {
	var d DebtSummary
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(tokens), 0), min(debt_since),"+
		" count(*) FILTER (WHERE debt_since <= $2), coalesce(sum(tokens) FILTER (WHERE debt_since <= $2), 0)"+
		" FROM "+s.tChunks+" WHERE index_name = $1 AND debt_since IS NOT NULL", s.cfg.Index, due).
		Scan(&d.Vectors, &d.Tokens, &oldest, &d.DueVectors, &d.DueTokens)
	if err != nil {
		return d, fmt.Errorf("read reuse debt of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	if oldest != nil {
		d.Oldest = *oldest
	}
	return d, nil
}

// NextDebt returns up to limit chunks in debt in the order they are to be
// repaid: first those dated at or before due (their window ends soonest),
// oldest first; then the rest, those with new words first, then by
// predicted distance (unknown first), then by age.
func (s *Store) NextDebt(ctx context.Context, due time.Time, limit int) ([]Debt, error) {
	rows, err := s.pool.Query(ctx, "SELECT c.id, c.doc_id, c.content_hash, c.text, c.tokens, c.debt_since,"+
		" coalesce(c.debt_distance, 'NaN'::real), c.debt_new_words, "+s.vecOf("c")+", coalesce(o.text, ''),"+
		" EXISTS (SELECT 1 FROM "+s.tCache+" x WHERE x.model = $3 AND x.dimensions = $4 AND x.content_hash = c.content_hash)"+
		" FROM "+s.tChunks+" c LEFT JOIN LATERAL (SELECT e.text FROM "+s.tCache+" e"+
		" WHERE e.model = $3 AND e.dimensions = $4 AND e.content_hash = c.vector_hash LIMIT 1) o ON true"+
		" WHERE c.index_name = $1 AND c.debt_since IS NOT NULL"+
		" ORDER BY CASE WHEN c.debt_since <= $2 THEN c.debt_since END NULLS LAST, c.debt_new_words DESC,"+
		" c.debt_distance DESC NULLS FIRST, c.debt_since, c.id LIMIT $5",
		s.cfg.Index, due, s.cfg.Model, s.cfg.Dimensions, limit)
	if err != nil {
		return nil, fmt.Errorf("read reuse debt of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Debt, error) {
		var d Debt
		var dist float32
		var v pgvector.Vector
		err := r.Scan(&d.ChunkID, &d.DocID, &d.Hash, &d.Text, &d.Tokens, &d.Since, &dist, &d.NewWords, &v, &d.OriginText, &d.Cached)
		d.Distance, d.Vector = float64(dist), v.Slice()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read reuse debt of %s: %w", s.cfg.Index, err)
	}
	return out, nil
}

// Rewrite is a fresh vector of a chunk's own text (ChunkID, whose content
// is still Hash). A nil Vector takes the one the cache holds for Hash.
type Rewrite struct {
	ChunkID int64
	Hash    string
	Text    string
	Vector  []float32
	// ModelVersion is the model name the provider reported for Vector
	// ("" unknown); the chunk row records it with the vector.
	ModelVersion string
}

// RewriteVectors gives each chunk the vector of its own text, in one
// transaction: the chunk row's embedding is replaced and its debt cleared
// (vector_hash becomes its content hash), the cache entry of its text is
// replaced by the fresh vector (and the chunk records its reported model
// version), and the monitor's last measurement of the
// chunk is dropped. A chunk whose content changed since it was read, or
// that is gone, keeps what the pipeline gave it. With onlyDebt, a chunk
// whose debt is already cleared is left alone too, so a repayment that
// overlaps another one (or a replay after a crash) writes no vector twice.
// It returns how many chunk rows it rewrote. `ragsync repair` and the
// background repayment both write through it.
func (s *Store) RewriteVectors(ctx context.Context, rws []Rewrite, onlyDebt bool) (int, error) {
	if len(rws) == 0 {
		return 0, nil
	}
	tSamples := pgx.Identifier{s.cfg.Schema, "monitor_samples"}.Sanitize()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Cache rows first, through the one cache statement (replacing what it
	// holds for these texts; see cacheWrite), in key order like every cache
	// writer, so that two writers of the same texts cannot deadlock.
	entries := make([]cacheEntry, 0, len(rws))
	for i := range rws {
		if r := &rws[i]; r.Vector != nil {
			entries = append(entries, cacheEntry{hash: r.Hash, vec: r.Vector, text: &r.Text, model: orNull(r.ModelVersion)})
		}
	}
	if len(entries) > 0 {
		sql, args := s.cacheWrite(entries, true)
		b.Queue(sql, args...)
	}
	for _, r := range rws {
		b.Queue("UPDATE "+s.tChunks+" c SET "+s.vecColumn()+" = "+s.storeVec("e.embedding")+", vector_hash = c.content_hash, model_version = e.model_version,"+
			" debt_since = NULL, debt_distance = NULL, debt_new_words = false"+
			" FROM "+s.tCache+" e WHERE c.id = $1 AND c.content_hash = $2 AND c.index_name = $3"+
			" AND ($4 OR c.debt_since IS NOT NULL)"+
			" AND e.model = $5 AND e.dimensions = $6 AND e.content_hash = c.content_hash",
			r.ChunkID, r.Hash, s.cfg.Index, !onlyDebt, s.cfg.Model, s.cfg.Dimensions)
		b.Queue("DELETE FROM "+tSamples+" WHERE index_name = $1 AND chunk_id = $2", s.cfg.Index, r.ChunkID)
	}
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	n := 0
	for i := 0; i < b.Len(); i++ {
		tag, err := br.Exec()
		if err != nil {
			return 0, fmt.Errorf("write %d vectors of %s: %w", len(rws), s.cfg.Index, classify(err, s.cfg.Schema))
		}
		if tag.Update() {
			n += int(tag.RowsAffected())
		}
	}
	return n, br.Close()
}

// MeasuredPastBound lists the chunks whose last measured distance was past
// the bound, farthest first: what `ragsync repair` re-embeds. It also counts
// the monitor's measurements whose chunk is gone or changed since (stale);
// with forgetStale it deletes them, without it (a dry run) it only reads,
// so a role with SELECT alone can run it.
func (s *Store) MeasuredPastBound(ctx context.Context, forgetStale bool) ([]Debt, int, error) {
	tSamples := pgx.Identifier{s.cfg.Schema, "monitor_samples"}.Sanitize()
	staleWhere := tSamples + " x WHERE x.index_name = $1 AND NOT EXISTS (" +
		"SELECT 1 FROM " + s.tChunks + " c WHERE c.id = x.chunk_id AND c.index_name = x.index_name AND c.content_hash = x.content_hash)"
	var stale int64
	if forgetStale {
		tag, err := s.pool.Exec(ctx, "DELETE FROM "+staleWhere, s.cfg.Index)
		if err != nil {
			return nil, 0, fmt.Errorf("drop stale measurements of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
		}
		stale = tag.RowsAffected()
	} else if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+staleWhere, s.cfg.Index).Scan(&stale); err != nil {
		return nil, 0, fmt.Errorf("count stale measurements of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	// Only measurements of the chunk's current content count: a stale one
	// (kept by a dry run) says nothing about the vector stored now.
	rows, err := s.pool.Query(ctx, "SELECT c.id, c.doc_id, c.content_hash, c.text, c.tokens FROM "+tSamples+" x JOIN "+s.tChunks+
		" c ON c.id = x.chunk_id AND c.index_name = x.index_name AND c.content_hash = x.content_hash"+
		" WHERE x.index_name = $1 AND x.past_bound ORDER BY x.cosine_distance DESC, c.id", s.cfg.Index)
	if err != nil {
		return nil, 0, fmt.Errorf("read measurements of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Debt, error) {
		var d Debt
		return d, r.Scan(&d.ChunkID, &d.DocID, &d.Hash, &d.Text, &d.Tokens)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read measurements of %s: %w", s.cfg.Index, err)
	}
	return out, int(stale), nil
}

// ReusedMeasurement is one of the monitor's measurements of a reused
// vector, with the texts it stands between.
type ReusedMeasurement struct {
	ChunkID    int64
	Text       string
	OriginText string
	Distance   float64
	MeasuredAt time.Time
}

// ReusedMeasurements returns the monitor's measurements of reused vectors
// taken after since, whose chunk still has the content measured and whose
// origin text the cache still holds: calibration data for the reuse
// predictor.
func (s *Store) ReusedMeasurements(ctx context.Context, since time.Time) ([]ReusedMeasurement, error) {
	tSamples := pgx.Identifier{s.cfg.Schema, "monitor_samples"}.Sanitize()
	rows, err := s.pool.Query(ctx, "SELECT c.id, c.text, e.text, x.cosine_distance, x.measured_at FROM "+tSamples+" x"+
		" JOIN "+s.tChunks+" c ON c.id = x.chunk_id AND c.content_hash = x.content_hash"+
		" JOIN "+s.tCache+" e ON e.model = $2 AND e.dimensions = $3 AND e.content_hash = c.vector_hash"+
		" WHERE x.index_name = $1 AND x.measured_at > $4 AND c.vector_hash <> c.content_hash AND e.text IS NOT NULL"+
		" ORDER BY x.measured_at", s.cfg.Index, s.cfg.Model, s.cfg.Dimensions, since)
	if err != nil {
		return nil, fmt.Errorf("read reuse measurements of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReusedMeasurement, error) {
		var m ReusedMeasurement
		return m, r.Scan(&m.ChunkID, &m.Text, &m.OriginText, &m.Distance, &m.MeasuredAt)
	})
	if err != nil {
		return nil, fmt.Errorf("read reuse measurements of %s: %w", s.cfg.Index, err)
	}
	return out, nil
}
