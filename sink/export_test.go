package sink

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
func HoldGroupSlotsForTest(s *Store) (queued func() int, release func()) {
	for range cap(s.group.slots) {
		s.group.slots <- struct{}{}
	}
	queued = func() int {
		s.group.mu.Lock()
		defer s.group.mu.Unlock()
		return len(s.group.queue)
	}
	release = func() {
		for range cap(s.group.slots) {
			<-s.group.slots
		}
	}
	return queued, release
}

// HoldLookupSlotsForTest is HoldGroupSlotsForTest for Lookups.
func HoldLookupSlotsForTest(s *Store) (queued func() int, release func()) {
	for range cap(s.lookups.slots) {
		s.lookups.slots <- struct{}{}
	}
	queued = func() int {
		s.lookups.mu.Lock()
		defer s.lookups.mu.Unlock()
		return len(s.lookups.queue)
	}
	release = func() {
		for range cap(s.lookups.slots) {
			<-s.lookups.slots
		}
	}
	return queued, release
}
