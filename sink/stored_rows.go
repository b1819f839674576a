package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoredRow is a document as an index keeps it for rebuilding another
// index from it (ragsync reindex): its source row and version, live or
// deleted.
type StoredRow struct {
	ID, Table, Key, Version string
	SourceTS                *time.Time
	// Row is the source row as JSON; nil when it was not kept.
	Row     []byte
	Deleted bool
}

// StoredRows reads up to limit documents of index with an id after after
// ("" from the start), in id order.
func (c *Catalog) StoredRows(ctx context.Context, index, after string, limit int) ([]StoredRow, error) {
	rows, err := c.pool.Query(ctx, "SELECT id, source_table, doc_key, version, source_ts, row, deleted_at IS NOT NULL FROM "+c.tDocs+
		" WHERE index_name = $1 AND id > $2 ORDER BY id LIMIT $3", index, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", index, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredRow, error) {
		var x StoredRow
		err := r.Scan(&x.ID, &x.Table, &x.Key, &x.Version, &x.SourceTS, &x.Row, &x.Deleted)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", index, err)
	}
	return out, nil
}

// AppliedSince counts, per source table, the live documents of index the
// sink wrote since since: what serve has applied of a snapshot requested
// then.
func (c *Catalog) AppliedSince(ctx context.Context, index string, tables []string, since time.Time) (map[string]int64, error) {
	out := make(map[string]int64, len(tables))
	for _, t := range tables {
		var n int64
		err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+c.tDocs+" WHERE index_name = $1 AND source_table = $2 AND updated_at >= $3 AND deleted_at IS NULL",
			index, t, since).Scan(&n)
		if err != nil {
			return nil, fmt.Errorf("count applied %s: %w", t, err)
		}
		out[t] = n
	}
	return out, nil
}

// Clock is the database's time, which stamps the documents' updated_at.
func (c *Catalog) Clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the index's clock: %w", err)
	}
	return now, nil
}
