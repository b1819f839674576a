package sink

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrTenantRequired means a search named no tenant on an index that holds
// documents of tenants: answering it would mix every tenant's documents,
// so it is refused (fail closed) unless the caller asks for every tenant
// explicitly (Query.AllTenants). It is an ErrInvalidQuery.
var ErrTenantRequired = fmt.Errorf("%w: tenant is required: this index holds documents of tenants, and a search without one would answer across all of them", ErrInvalidQuery)

// tenantRecheck is how long an index found without tenant documents is
// trusted to stay so before it is read again. A document with a tenant
// written through this Store marks the index at once; the window only
// covers one written by another process.
const tenantRecheck = 5 * time.Second

// tenancy remembers whether an index holds tenant documents. Once it does
// it always does: a tenant's documents may come back, and refusing a
// tenantless search costs nothing that isolation is worth.
type tenancy struct {
	tenanted atomic.Bool
	checked  atomic.Int64 // unix nanos of the last read that found none
}

// checkTenant refuses q when it names no tenant, does not ask for every
// tenant, and the index holds documents with a tenant.
func (s *Store) checkTenant(ctx context.Context, q Query) error {
	if q.Tenant != "" || q.AllTenants {
		return nil
	}
	t := &s.tenancy
	if !t.tenanted.Load() && time.Since(time.Unix(0, t.checked.Load())) > tenantRecheck {
		var has bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.tDocs+" WHERE index_name = $1 AND tenant IS NOT NULL AND tenant <> '')",
			s.cfg.Index).Scan(&has)
		if err != nil {
			return fmt.Errorf("check the index's tenants: %w", hintMigrate(err, s.cfg.Schema))
		}
		if has {
			t.tenanted.Store(true)
		} else {
			t.checked.Store(time.Now().UnixNano())
		}
	}
	if t.tenanted.Load() {
		return ErrTenantRequired
	}
	return nil
}

// sawTenant marks the index as holding tenant documents once one is
// written through this Store.
func (s *Store) sawTenant(tenant string) {
	if tenant != "" {
		s.tenancy.tenanted.Store(true)
	}
}
