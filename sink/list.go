package sink

import (
	"context"
	"fmt"

	"github.com/pgvector/pgvector-go"
)

// LiveDocument names a document that is in search: its id and tenant.
type LiveDocument struct {
	ID, Tenant string
}

// EachLive calls fn for every live (not deleted) document of the index, in
// id order, streaming rows so memory stays flat on large indexes. It stops
// at the first error fn returns. The front door's Bloom filters are rebuilt
// from it.
func (s *Store) EachLive(ctx context.Context, fn func(LiveDocument) error) error {
	rows, err := s.pool.Query(ctx, "SELECT id, coalesce(tenant, '') FROM "+s.tDocs+
		" WHERE index_name = $1 AND deleted_at IS NULL ORDER BY id", s.cfg.Index)
	if err != nil {
		return fmt.Errorf("list documents: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d LiveDocument
		if err := rows.Scan(&d.ID, &d.Tenant); err != nil {
			return fmt.Errorf("list documents: %w", err)
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	return rows.Err()
}

// LiveChunk is a chunk of a live document as search reads it.
type LiveChunk struct {
	Hash, Text string
	Vector     []float32
}

// EachLiveContent calls fn for every live (not deleted) document of the
// index, in id order, with its chunks in position order (none for a
// document without chunks), streaming rows so only one document is held
// at a time. It stops at the first error fn returns. It is for comparing
// what two builds of the same state hold, as the incremental benchmark
// compares a replay with a fresh load.
func (s *Store) EachLiveContent(ctx context.Context, fn func(id string, chunks []LiveChunk) error) error {
	rows, err := s.pool.Query(ctx, "SELECT d.id, c.content_hash, c.text, "+s.vecOf("c")+
		" FROM "+s.tDocs+" d LEFT JOIN "+s.tChunks+" c ON c.index_name = d.index_name AND c.doc_id = d.id"+
		" WHERE d.index_name = $1 AND d.deleted_at IS NULL ORDER BY d.id, c.position", s.cfg.Index)
	if err != nil {
		return fmt.Errorf("read live documents: %w", classify(err, s.cfg.Schema))
	}
	defer rows.Close()
	var (
		cur    string
		chunks []LiveChunk
		seen   bool
	)
	for rows.Next() {
		var (
			id         string
			hash, text *string
			vec        *pgvector.Vector
		)
		if err := rows.Scan(&id, &hash, &text, &vec); err != nil {
			return fmt.Errorf("read live documents: %w", err)
		}
		if seen && id != cur {
			if err := fn(cur, chunks); err != nil {
				return err
			}
			chunks = nil
		}
		cur, seen = id, true
		if hash != nil {
			chunks = append(chunks, LiveChunk{Hash: *hash, Text: *text, Vector: vec.Slice()})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read live documents: %w", err)
	}
	if seen {
		return fn(cur, chunks)
	}
	return nil
}
