package cdc

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// LiveIndex lists the live (not deleted) documents of a table with their
// stored versions; sink.Store implements it.
type LiveIndex interface {
	LiveVersions(ctx context.Context, table string, fn func(key string, v Version) error) error
}

// Census counts what Outdated saw of a table's live documents.
type Census struct {
	// Live is every live document of the table.
	Live int
	// Outdated were passed to fn.
	Outdated int
	// Foreign were written by another source (another database, another
	// connector, another server), or carry no position: left alone.
	Foreign int
	// Unknown name no source (stored before versions named theirs): left
	// alone, since nothing proves they are this source's.
	Unknown int
}

// LeftAlone is how many documents the reconcile could not judge.
func (c Census) LeftAlone() int { return c.Foreign + c.Unknown }

// OutdatedOptions widens what a load may judge beyond its own source.
type OutdatedOptions struct {
	// Succeeds are the sources this one replaced by adopted moves (the same
	// database before a dump/restore or an upgrade): their documents are
	// the load's own, older ones, whatever their positions.
	Succeeds []string
	// ClaimUnknown takes documents whose versions name no source (stored
	// before versions named theirs) as the load's own, ordered by position
	// as they were then. Only right when the load's database is the only
	// source that ever wrote the table: the caller asks for it explicitly.
	ClaimUnknown bool
}

// Outdated is the first step of reconciling a full load of table with the
// index: it calls fn with the key of each of the table's live documents
// older than load, the version the load's rows carry. The load wrote every
// row of its snapshot at that version (or left it to a newer change), so
// such a document was written by neither: its row is not in the snapshot.
// Deleting it at load fences it like any change, so a change newer than the
// snapshot is never undone.
//
// Only a document of load's own source is ordered against it: a position
// of another source (another database's LSN, another connector's) says
// nothing about this snapshot, and neither does a document that names no
// source. Those are left alone and counted. A document of a source in
// o.Succeeds is outdated whatever its position: the load read the database
// that took its place; with o.ClaimUnknown, one that names no source is
// judged by position, as before versions named their source.
func Outdated(ctx context.Context, ix LiveIndex, table string, load Version, o OutdatedOptions, fn func(key string) error) (Census, error) {
	var c Census
	err := ix.LiveVersions(ctx, table, func(key string, have Version) error {
		c.Live++
		switch {
		case load.Source == "":
			c.Unknown++
			return nil
		case have.Source == "" && !o.ClaimUnknown:
			c.Unknown++
			return nil
		case have.Source == "":
			// Claimed: ordered by position against the load, as every
			// version was before versions named their source.
			if have.Kind != load.Kind || !have.Positional() {
				c.Foreign++
				return nil
			}
			if compareParts(have.Parts, load.Parts) >= 0 {
				return nil
			}
		case have.Source != load.Source:
			if !slices.Contains(o.Succeeds, have.Source) {
				c.Foreign++
				return nil
			}
		case have.Kind != load.Kind || !have.Positional():
			c.Foreign++
			return nil
		case have.Compare(load) >= 0:
			return nil
		}
		c.Outdated++
		return fn(key)
	})
	return c, err
}

// ReconcileLimit bounds how much of a table one reconcile may delete: a
// reconcile that would delete more is refused whole, before it deletes
// anything, since a share that large is more often a partial or foreign
// view (a role under row-level security, the wrong database) than rows
// that are really gone.
type ReconcileLimit struct {
	// Share is the fraction of the table's live documents (0..1).
	Share float64
	// Count, when > 0, is an absolute number of documents instead.
	Count int
	// Unlimited lets any share through (--yes).
	Unlimited bool
}

// DefaultReconcileLimit is 10% of a table's live documents; up to
// reconcileFloor documents always pass, so a small table can lose a few rows.
var DefaultReconcileLimit = ReconcileLimit{Share: 0.10}

const reconcileFloor = 5

// ParseReconcileLimit reads "10%", "0.1" (a share) or "500" (a count).
func ParseReconcileLimit(s string) (ReconcileLimit, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || f > 100 || math.IsNaN(f) {
			return ReconcileLimit{}, fmt.Errorf("%q: want a percentage 0%%..100%%, a share 0..1 or a document count", s)
		}
		return ReconcileLimit{Share: f / 100}, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && !strings.Contains(s, ".") {
		if n == 0 {
			return ReconcileLimit{Share: 0, Count: 0}, nil
		}
		return ReconcileLimit{Count: n}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
		return ReconcileLimit{}, fmt.Errorf("%q: want a percentage 0%%..100%%, a share 0..1 or a document count", s)
	}
	return ReconcileLimit{Share: f}, nil
}

// String renders l as ParseReconcileLimit reads it.
func (l ReconcileLimit) String() string {
	switch {
	case l.Unlimited:
		return "unlimited"
	case l.Count > 0:
		return strconv.Itoa(l.Count)
	}
	return strconv.FormatFloat(l.Share*100, 'f', -1, 64) + "%"
}

// Allows reports whether deleting gone of live documents is within l.
func (l ReconcileLimit) Allows(gone, live int) bool {
	switch {
	case l.Unlimited || gone == 0:
		return true
	case l.Count > 0:
		return gone <= l.Count
	}
	if gone <= reconcileFloor && l.Share > 0 {
		return true
	}
	return float64(gone) <= l.Share*float64(live)
}

// ReconcileRefused is a reconcile that would delete more than its limit: it
// deleted nothing.
type ReconcileRefused struct {
	Table  string
	Gone   int
	Live   int
	Limit  ReconcileLimit
	Sample []string // up to ten of the keys it would delete
}

func (e *ReconcileRefused) Error() string {
	share := 0.0
	if e.Live > 0 {
		share = 100 * float64(e.Gone) / float64(e.Live)
	}
	return fmt.Sprintf("reconcile %s: would delete %d of its %d documents (%.0f%%), more than the limit %s; nothing was deleted. Keys: %s. "+
		"A share this large is more often a partial view (row-level security, a role without access, the wrong database) than rows that are gone: "+
		"check that the rows are really gone, then allow it (backfill: --reconcile-max %d or --yes; serve: source.postgres.reconcile_max), or keep them (--no-reconcile)",
		e.Table, e.Gone, e.Live, share, e.Limit, strings.Join(e.Sample, ", "), e.Gone)
}

// Permanent reports that retrying does not help.
func (e *ReconcileRefused) Permanent() bool { return true }

// CheckReconcile returns a *ReconcileRefused when deleting gone (the keys)
// of live documents exceeds l.
func CheckReconcile(table string, gone []string, live int, l ReconcileLimit) error {
	if l.Allows(len(gone), live) {
		return nil
	}
	return &ReconcileRefused{Table: table, Gone: len(gone), Live: live, Limit: l, Sample: gone[:min(len(gone), 10)]}
}
