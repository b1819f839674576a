package sink

import (
	"context"
	"fmt"
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
