package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// ChunkVector is a stored chunk's text and the vector stored for it, for
// measuring the index against fresh embeddings.
type ChunkVector struct {
	Text   string
	Vector []float32
}

// ChunkIDs returns the ids of every chunk of the index, in no order.
func (s *Store) ChunkIDs(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT id FROM "+s.tChunks+" WHERE index_name = $1", s.cfg.Index)
	if err != nil {
		return nil, fmt.Errorf("read chunk ids of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read chunk ids of %s: %w", s.cfg.Index, err)
	}
	return ids, nil
}

// ChunkVectors returns the text and stored vector of the chunks with the
// given ids (an id given twice is read twice), or of every chunk of the
// index when ids is nil.
func (s *Store) ChunkVectors(ctx context.Context, ids []int64) ([]ChunkVector, error) {
	q := "SELECT c.text, " + s.vecOf("c") + " FROM " + s.tChunks + " c WHERE c.index_name = $1"
	args := []any{s.cfg.Index}
	if ids != nil {
		q = "SELECT c.text, " + s.vecOf("c") + " FROM unnest($2::bigint[]) AS x(id) JOIN " + s.tChunks + " c ON c.id = x.id WHERE c.index_name = $1"
		args = append(args, ids)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read chunk vectors of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChunkVector, error) {
		var cv ChunkVector
		var v pgvector.Vector
		err := r.Scan(&cv.Text, &v)
		cv.Vector = v.Slice()
		return cv, err
	})
	if err != nil {
		return nil, fmt.Errorf("read chunk vectors of %s: %w", s.cfg.Index, err)
	}
	return out, nil
}

// NewestDebt returns when the most recent reused vector still owed was
// recorded, or the database's now when nothing is owed.
func (s *Store) NewestDebt(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.pool.QueryRow(ctx, "SELECT coalesce(max(debt_since), now()) FROM "+s.tChunks+" WHERE index_name = $1", s.cfg.Index).Scan(&t)
	if err != nil {
		return t, fmt.Errorf("read newest debt of %s: %w", s.cfg.Index, classify(err, s.cfg.Schema))
	}
	return t, nil
}
