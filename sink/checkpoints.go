package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Checkpoint is where the backfill of one source table into one index
// stands, and what it belongs to: a position (LastKey) means something only
// in the keyset of the same key columns, filtered by the same condition.
type Checkpoint struct {
	Table string
	// KeyColumns are the id columns LastKey is a position in, in order.
	KeyColumns []string
	// Where is the --where condition the rows were read with ("" for none).
	Where string
	// LastKey holds the id columns' values, as text, of the last row whose
	// page the sink committed.
	LastKey []string
	// Position is the WAL position of the snapshot that page was read in.
	Position string
	// Rows is how many rows were read up to LastKey.
	Rows int64
	Done bool
	// Unlabelled is true for a checkpoint written before checkpoints
	// recorded their key columns and condition: it cannot be checked.
	Unlabelled bool
}

// Mismatch spells out how cp differs from a run over keyColumns and where,
// "" when it belongs to that run.
func (cp Checkpoint) Mismatch(keyColumns []string, where string) string {
	if cp.Unlabelled {
		return "it was written by an older ragsync that did not record the key columns and --where it belongs to"
	}
	var diffs []string
	if !slices.Equal(cp.KeyColumns, keyColumns) {
		diffs = append(diffs, fmt.Sprintf("key columns (%s) then, (%s) now", strings.Join(cp.KeyColumns, ", "), strings.Join(keyColumns, ", ")))
	}
	if cp.Where != where {
		diffs = append(diffs, fmt.Sprintf("--where %s then, %s now", quoteOrNone(cp.Where), quoteOrNone(where)))
	}
	return strings.Join(diffs, "; ")
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

// Checkpoints keeps the backfill checkpoints of one index (table
// backfill_checkpoints), one per source table. It does not own the pool.
type Checkpoints struct {
	pool  *pgxpool.Pool
	index string
	table string
}

// NewCheckpoints returns the checkpoints of index in schema.
func NewCheckpoints(pool *pgxpool.Pool, schema, index string) *Checkpoints {
	return &Checkpoints{pool: pool, index: index, table: pgx.Identifier{schema, "backfill_checkpoints"}.Sanitize()}
}

// Save records cp.
func (c *Checkpoints) Save(ctx context.Context, cp Checkpoint) error {
	key, err := json.Marshal(cp.LastKey)
	if err != nil {
		return err
	}
	_, err = c.pool.Exec(ctx, "INSERT INTO "+c.table+" (index_name, source_table, key_columns, where_sql, last_key, position, rows_read, done, updated_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())"+
		" ON CONFLICT (index_name, source_table) DO UPDATE SET key_columns = $3, where_sql = $4, last_key = $5, position = $6, rows_read = $7, done = $8, updated_at = now()",
		c.index, cp.Table, cp.KeyColumns, cp.Where, key, cp.Position, cp.Rows, cp.Done)
	if err != nil {
		return fmt.Errorf("save backfill checkpoint %s: %w", cp.Table, err)
	}
	return nil
}

// Load returns table's checkpoint, if any.
func (c *Checkpoints) Load(ctx context.Context, table string) (Checkpoint, bool, error) {
	cp := Checkpoint{Table: table}
	var key []byte
	var pos, where *string
	err := c.pool.QueryRow(ctx, "SELECT key_columns, where_sql, last_key, position, rows_read, done FROM "+c.table+" WHERE index_name = $1 AND source_table = $2",
		c.index, table).Scan(&cp.KeyColumns, &where, &key, &pos, &cp.Rows, &cp.Done)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("load backfill checkpoint %s: %w", table, err)
	}
	cp.Unlabelled = cp.KeyColumns == nil
	if pos != nil {
		cp.Position = *pos
	}
	if where != nil {
		cp.Where = *where
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
	_, err := c.pool.Exec(ctx, "DELETE FROM "+c.table+" WHERE index_name = $1 AND source_table = ANY ($2)", c.index, tables)
	if err != nil {
		return fmt.Errorf("reset backfill checkpoints: %w", err)
	}
	return nil
}
