package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
)

// IndexSource yields the documents stored in one index as changes, to
// build another index from them (`ragsync reindex`): no access to the
// document database is needed, since the sink keeps every document's row.
// Live documents become snapshot reads and deleted ones deletes, each at
// its stored version, so the new index fences exactly like the old one and
// running it again only applies what changed in between. Messages carry the
// change as JSON; ChangeDecoder reads them.
type IndexSource struct {
	pool     *pgxpool.Pool
	index    string
	pageRows int
	lastID   *string
	done     bool
	read     atomic.Int64
}

// NewIndexSource reads index from pool (search_path on its schema), pageRows
// documents per batch (default 500).
func NewIndexSource(pool *pgxpool.Pool, index string, pageRows int) *IndexSource {
	if pageRows <= 0 {
		pageRows = 500
	}
	return &IndexSource{pool: pool, index: index, pageRows: pageRows}
}

// Read is how many documents have been read so far. Safe for concurrent use.
func (s *IndexSource) Read() int64 { return s.read.Load() }

// Fetch reads the next page of documents, in id order; io.EOF at the end.
func (s *IndexSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	if s.done {
		return cdc.Batch{}, io.EOF
	}
	q := "SELECT id, source_table, doc_key, version, source_ts, row, deleted_at IS NOT NULL FROM documents WHERE index_name = $1"
	args := []any{s.index}
	if s.lastID != nil {
		q += " AND id > $2"
		args = append(args, *s.lastID)
	}
	q += fmt.Sprintf(" ORDER BY id LIMIT %d", s.pageRows)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return cdc.Batch{}, fmt.Errorf("read index %s: %w", s.index, err)
	}
	defer rows.Close()
	var msgs []cdc.Message
	for rows.Next() {
		var (
			id, table, key, version string
			ts                      *time.Time
			raw                     []byte
			deleted                 bool
		)
		if err := rows.Scan(&id, &table, &key, &version, &ts, &raw, &deleted); err != nil {
			return cdc.Batch{}, fmt.Errorf("read index %s: %w", s.index, err)
		}
		v, err := cdc.ParseVersion(version)
		if err != nil {
			return cdc.Batch{}, fmt.Errorf("read index %s: document %s: %w", s.index, id, err)
		}
		// json.Number keeps integers as they were (float64 would render a
		// large id as 1e+06 in a template).
		var row map[string]any
		if len(raw) > 0 {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&row); err != nil {
				return cdc.Batch{}, fmt.Errorf("read index %s: document %s row: %w", s.index, id, err)
			}
		}
		ch := cdc.Change{Op: cdc.OpRead, Table: table, DocKey: key, Version: v, After: row, Snapshot: true}
		if ts != nil {
			ch.SourceTS = *ts
		}
		if deleted {
			ch.Op, ch.After = cdc.OpDelete, nil
		}
		b, err := json.Marshal(ch)
		if err != nil {
			return cdc.Batch{}, err
		}
		msgs = append(msgs, cdc.Message{Topic: "ragsync-reindex." + s.index, Key: []byte(id), Value: b})
		s.lastID = &id
	}
	if err := rows.Err(); err != nil {
		return cdc.Batch{}, fmt.Errorf("read index %s: %w", s.index, err)
	}
	if len(msgs) == 0 {
		s.done = true
		return cdc.Batch{}, io.EOF
	}
	s.read.Add(int64(len(msgs)))
	return cdc.Batch{Messages: msgs}, nil
}

// ChangeDecoder decodes IndexSource's messages.
type ChangeDecoder struct{}

// Decode reads a change written by IndexSource.
func (ChangeDecoder) Decode(m cdc.Message) (cdc.Change, error) {
	var ch cdc.Change
	dec := json.NewDecoder(bytes.NewReader(m.Value))
	dec.UseNumber()
	if err := dec.Decode(&ch); err != nil {
		return cdc.Change{}, &cdc.DecodeError{Coord: cdc.Coord{Topic: m.Topic}, Reason: "reindex", Err: err}
	}
	return ch, nil
}
