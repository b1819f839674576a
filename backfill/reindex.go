package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// IndexSource yields the documents stored in one index as changes, to
// build another index from them (`ragsync reindex`): no access to the
// document database is needed, since the sink keeps every document's row.
// Live documents become snapshot reads and deleted ones deletes, each at
// its stored version, so the new index fences exactly like the old one and
// running it again only applies what changed in between. Each record
// carries its change as built here: nothing is encoded to be decoded again.
type IndexSource struct {
	rows     StoredRows
	index    string
	pageRows int
	lastID   string
	done     bool
	read     atomic.Int64
}

// StoredRows reads the documents an index keeps (sink.Catalog).
type StoredRows interface {
	StoredRows(ctx context.Context, index, after string, limit int) ([]sink.StoredRow, error)
}

// NewIndexSource reads index through rows, pageRows documents per batch
// (default 500).
func NewIndexSource(rows StoredRows, index string, pageRows int) *IndexSource {
	if pageRows <= 0 {
		pageRows = 500
	}
	return &IndexSource{rows: rows, index: index, pageRows: pageRows}
}

// Read is how many documents have been read so far. Safe for concurrent use.
func (s *IndexSource) Read() int64 { return s.read.Load() }

// Fetch reads the next page of documents, in id order; io.EOF at the end.
func (s *IndexSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	if s.done {
		return cdc.Batch{}, io.EOF
	}
	page, err := s.rows.StoredRows(ctx, s.index, s.lastID, s.pageRows)
	if err != nil {
		return cdc.Batch{}, err
	}
	var msgs []cdc.Record
	for _, d := range page {
		v, err := cdc.ParseVersion(d.Version)
		if err != nil {
			return cdc.Batch{}, fmt.Errorf("read index %s: document %s: %w", s.index, d.ID, err)
		}
		// json.Number keeps integers as they were (float64 would render a
		// large id as 1e+06 in a template).
		var row map[string]any
		if len(d.Row) > 0 {
			dec := json.NewDecoder(bytes.NewReader(d.Row))
			dec.UseNumber()
			if err := dec.Decode(&row); err != nil {
				return cdc.Batch{}, fmt.Errorf("read index %s: document %s row: %w", s.index, d.ID, err)
			}
		}
		v.Snapshot = true
		if v.TS == 0 && d.SourceTS != nil {
			v.TS = cdc.VersionTS(*d.SourceTS)
		}
		ch := cdc.Change{Op: cdc.OpRead, Table: d.Table, DocKey: d.Key, Version: v, After: row}
		if d.Deleted {
			ch.Op, ch.After = cdc.OpDelete, nil
		}
		ch.Coord = cdc.Coord{Topic: "ragsync-reindex." + s.index}
		msgs = append(msgs, cdc.Record{Raw: cdc.Raw{Topic: ch.Coord.Topic, Key: []byte(d.ID)}, Change: &ch})
		s.lastID = d.ID
	}
	if len(msgs) == 0 {
		s.done = true
		return cdc.Batch{}, io.EOF
	}
	s.read.Add(int64(len(msgs)))
	return cdc.Batch{Records: msgs}, nil
}
