package sink

import (
	"context"
	"fmt"
)

// Writes counts what the schema's indexes hold, across all of them, for a
// caller that watches another process write (a benchmark's child serve):
// the documents, those whose last write was an update (it records the
// edit's measure; a create does not), the chunks, those written after the
// chunk id afterChunk, and the newest chunk id (the mark to pass as
// afterChunk later).
type Writes struct {
	Documents, Updated, Chunks, ChunksAfter, LastChunk int64
}

// Writes reads the counts in one statement. It reads only.
func (c *Catalog) Writes(ctx context.Context, afterChunk int64) (Writes, error) {
	var w Writes
	err := c.pool.QueryRow(ctx, "SELECT"+
		" (SELECT count(*) FROM "+c.tDocs+"),"+
		" (SELECT count(*) FROM "+c.tDocs+" WHERE edit_method IS NOT NULL),"+
		" (SELECT count(*) FROM "+c.tChunks+"),"+
		" (SELECT count(*) FROM "+c.tChunks+" WHERE id > $1),"+
		" (SELECT coalesce(max(id), 0) FROM "+c.tChunks+")", afterChunk).
		Scan(&w.Documents, &w.Updated, &w.Chunks, &w.ChunksAfter, &w.LastChunk)
	if err != nil {
		return Writes{}, fmt.Errorf("count writes: %w", hintMigrate(err, c.schema))
	}
	return w, nil
}

// LiveDocuments counts the live (not deleted) documents of a source table
// ("schema.table") across the schema's indexes. It reads only.
func (c *Catalog) LiveDocuments(ctx context.Context, table string) (int64, error) {
	var n int64
	err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+c.tDocs+" WHERE deleted_at IS NULL AND source_table = $1", table).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count documents of %s: %w", table, hintMigrate(err, c.schema))
	}
	return n, nil
}
