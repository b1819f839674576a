package sink

import "context"

// SearchSQLForTest exposes the vector query so a test can EXPLAIN it.
func SearchSQLForTest(s *Store, vec []float32, q Query) (string, []any) {
	q, _ = q.withDefaults()
	return s.searchSQL(vec, q)
}

// SetTruncatePageRowsForTest makes s's Truncate page n rows at a time.
func SetTruncatePageRowsForTest(s *Store, n int) { s.truncatePageRows = n }

// ServingHoldPIDForTest is the backend that holds h's locks.
func ServingHoldPIDForTest(h *ServingHold) uint32 { return h.conn.PgConn().PID() }

// DDLLockKeyForTest is the advisory lock every index DDL of schema takes.
func DDLLockKeyForTest(schema string) int64 { return lockKey("ragsync.ddl", schema) }

// HoldGroupSlotsForTest takes every group slot of s, so concurrent Upserts
// queue; release lets them go. queued reports the documents waiting.
func HoldGroupSlotsForTest(s *Store) (queued func() int, release func()) { return holdSlots(s.group) }

// HoldLookupSlotsForTest is HoldGroupSlotsForTest for Lookups.
func HoldLookupSlotsForTest(s *Store) (queued func() int, release func()) {
	return holdSlots(s.lookups)
}

func holdSlots[R comparable](g *sharing[R]) (queued func() int, release func()) {
	for range cap(g.slots) {
		g.slots <- struct{}{}
	}
	return g.queued, func() {
		for range cap(g.slots) {
			<-g.slots
		}
	}
}

// LookupBatchForTest runs one group of Lookups (fenceOnly: Fences) of ids,
// as concurrent callers would share it, and returns each one's result.
func (s *Store) LookupBatchForTest(ctx context.Context, ids []string, fenceOnly bool) ([]Lookup, []error) {
	batch := make([]*lookupRequest, len(ids))
	for i, id := range ids {
		batch[i] = &lookupRequest{id: id, fenceOnly: fenceOnly, done: make(chan struct{})}
	}
	s.lookupBatch(ctx, batch)
	outs, errs := make([]Lookup, len(ids)), make([]error, len(ids))
	for i, r := range batch {
		outs[i], errs[i] = r.out, r.err
	}
	return outs, errs
}

// HalfvecSupportForTest is the pgvector version check of halfvec and bit
// indexes.
func HalfvecSupportForTest(t VectorType, version string) error { return halfvecSupport(t, version) }
