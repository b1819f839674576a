package cdc

import "context"

// LiveIndex lists the live (not deleted) documents of a table with their
// stored versions; sink.Store implements it.
type LiveIndex interface {
	LiveVersions(ctx context.Context, table string, fn func(key string, v Version) error) error
}

// Outdated is the first step of reconciling a full load of table with the
// index: it calls fn with the key of each of the table's live documents
// older than load, the version the load's rows carry. The load wrote every row of its snapshot
// at that version (or left it to a newer change), so such a document was
// written by neither: its row is not in the snapshot. Deleting it at load
// fences it like any change, so a change newer than the snapshot is never
// undone.
//
// Only a version of load's own kind is ordered by position against it; any
// other (another database's position, a "ts" fallback) only by commit time,
// which says nothing about the snapshot. Such documents are left alone and
// counted in other.
func Outdated(ctx context.Context, ix LiveIndex, table string, load Version, fn func(key string) error) (other int, err error) {
	err = ix.LiveVersions(ctx, table, func(key string, have Version) error {
		switch {
		case have.Kind != load.Kind || !have.Positional():
			other++
		case have.Compare(load) < 0:
			return fn(key)
		}
		return nil
	})
	return other, err
}
