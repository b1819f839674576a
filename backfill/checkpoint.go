package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Checkpoint is where the backfill of one table stands.
type Checkpoint struct {
	Table    string
	LastKey  []string // id column values as text of the last committed row
	Position string   // WAL position of the snapshot the last page was read in
	Rows     int64    // rows read up to LastKey
	Done     bool
}

// Checkpoints keeps checkpoints in the index's schema (table
// backfill_checkpoints, migration 00006), one row per index and table.
type Checkpoints struct {
	pool  *pgxpool.Pool
	index string
}

// NewCheckpoints returns the checkpoints of index in the schema pool's
// search_path points at (sink.OpenPool's pool). The caller owns pool.
func NewCheckpoints(pool *pgxpool.Pool, index string) *Checkpoints {
	return &Checkpoints{pool: pool, index: index}
}

// Save records cp.
func (c *Checkpoints) Save(ctx context.Context, cp Checkpoint) error {
	key, err := json.Marshal(cp.LastKey)
	if err != nil {
		return err
	}
	_, err = c.pool.Exec(ctx, `INSERT INTO backfill_checkpoints (index_name, source_table, last_key, position, rows_read, done, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, now())
		ON CONFLICT (index_name, source_table) DO UPDATE SET last_key = $3, position = $4, rows_read = $5, done = $6, updated_at = now()`,
		c.index, cp.Table, key, cp.Position, cp.Rows, cp.Done)
	if err != nil {
		return fmt.Errorf("save backfill checkpoint %s: %w", cp.Table, err)
	}
	return nil
}

// Load returns table's checkpoint, if any.
func (c *Checkpoints) Load(ctx context.Context, table string) (Checkpoint, bool, error) {
	cp := Checkpoint{Table: table}
	var key []byte
	var pos *string
	err := c.pool.QueryRow(ctx, "SELECT last_key, position, rows_read, done FROM backfill_checkpoints WHERE index_name = $1 AND source_table = $2",
		c.index, table).Scan(&key, &pos, &cp.Rows, &cp.Done)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("load backfill checkpoint %s: %w", table, err)
	}
	if pos != nil {
		cp.Position = *pos
	}
	if len(key) > 0 {
		if err := json.Unmarshal(key, &cp.LastKey); err != nil {
			return cp, false, fmt.Errorf("load backfill checkpoint %s: last_key: %w", table, err)
		}
	}
	return cp, true, nil
}

// Reset forgets the checkpoints of tables: the next run starts over.
func (c *Checkpoints) Reset(ctx context.Context, tables []string) error {
	_, err := c.pool.Exec(ctx, "DELETE FROM backfill_checkpoints WHERE index_name = $1 AND source_table = ANY ($2)", c.index, tables)
	if err != nil {
		return fmt.Errorf("reset backfill checkpoints: %w", err)
	}
	return nil
}
