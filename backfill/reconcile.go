package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ragsync/ragsync/cdc"
)

// Index is what reconciliation reads from the index: the live documents of
// a table with their versions. sink.Store implements it.
type Index = cdc.LiveIndex

// Reconciliation. A table read whole in one snapshot (from its start, no
// Where) says which rows exist as of the snapshot position P; once its rows
// are applied, the index's documents of the table that the run did not
// write and that no newer change wrote are those with a version below the
// rows' own, pg:(P-1) (cdc.Outdated). Such a document is deleted, at the
// rows' version, only if its row exists neither now nor in a transaction
// still running from before P:
//
//   - A transaction that wrote before P and committed after the snapshot
//     (snapshot.go's straddling transaction) carries an LSN below P - 1:
//     its document looks outdated, and a delete at P - 1 would fence its
//     change out. The run first waits for every transaction that held a
//     write lock on the table just after P was read to end (waitWriters),
//     then asks the table: a row such a transaction created or changed
//     exists now, and is left to the stream.
//   - Any later change has an LSN of at least P, above the delete's
//     version: the sink's fence keeps it, whichever is applied first.
//
// A Where reads part of a table and a resumed table was partly read in an
// earlier snapshot: neither says which rows are gone, so neither
// reconciles (Debezium's snapshots never delete at all).

// reconcileAfter makes t's reconciliation due once ack, the acknowledgement
// of the table's last batch, has run: every row read is then applied.
func (s *Source) reconcileAfter(t *table, ack func(context.Context) error) func(context.Context) error {
	applied := make(chan struct{})
	t.applied, s.rec = applied, t
	return func(ctx context.Context) error {
		if ack != nil {
			if err := ack(ctx); err != nil {
				return err
			}
		}
		select {
		case <-applied:
		default:
			close(applied)
		}
		return nil
	}
}

// reconcileNext returns the next page of deletes of the table being
// reconciled (s.rec); ok is false once none are left.
func (s *Source) reconcileNext(ctx context.Context) (b cdc.Batch, ok bool, err error) {
	t := s.rec
	if !t.listed {
		gone, left, live, err := s.gone(ctx, t)
		if err != nil {
			return cdc.Batch{}, false, err
		}
		if err := cdc.CheckReconcile(t.Name, gone, live, *s.cfg.ReconcileLimit); err != nil {
			var refused *cdc.ReconcileRefused
			if !s.cfg.DryRun || !errors.As(err, &refused) {
				return cdc.Batch{}, false, err
			}
			s.mu.Lock()
			s.prog.Refused = append(s.prog.Refused, refused)
			s.mu.Unlock()
			gone = nil
		}
		s.mu.Lock()
		s.prog.Reconciled += int64(len(gone))
		s.prog.LeftAlone += left
		s.mu.Unlock()
		s.cfg.Logger.InfoContext(ctx, "backfill table reconciled: documents whose rows are gone", "table", t.Name,
			"documents", len(gone), "left_alone", left)
		if left > 0 {
			s.cfg.Logger.WarnContext(ctx, "backfill reconciliation left documents alone: another source wrote them (another database or server, a Debezium connector), they were stored before versions named their source, or their keys do not read back as the id columns", "table", t.Name, "documents", left)
		}
		t.listed, t.gone = true, gone
	}
	if len(t.gone) == 0 {
		s.rec = nil
		return cdc.Batch{}, false, nil
	}
	k := min(len(t.gone), s.cfg.PageRows)
	now := time.Now()
	v := s.rowVersion(now)
	msgs := make([]cdc.Record, k)
	for i, key := range t.gone[:k] {
		ch := cdc.Change{Op: cdc.OpDelete, Table: t.Name, DocKey: key, Version: v,
			Coord: cdc.Coord{Topic: s.cfg.Topic + "." + t.Name, Offset: int64(s.snap.position)}}
		msgs[i] = cdc.Record{Raw: cdc.Raw{Topic: ch.Coord.Topic, Offset: ch.Coord.Offset, Timestamp: now}, Change: &ch}
	}
	t.gone = t.gone[k:]
	return cdc.Batch{Records: msgs}, true, nil
}

// rowVersion is the version of the rows this run reads, with commit time
// now: P - 1, above every change the snapshot sees and below every change
// written after a row was read (snapshot.go), of the source the run
// reads, in the epoch its recorded moves give that time.
func (s *Source) rowVersion(now time.Time) cdc.Version {
	ms := uint64(max(now.UnixMilli(), 0))
	return cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{s.snap.position - 1}, TS: ms, Snapshot: true, Source: s.source, Epoch: s.epoch(ms)}
}

// epoch is how many recorded moves of the run's source happened at or
// before ms, as the decoder counts them for the source's events.
func (s *Source) epoch(ms uint64) uint32 {
	var n uint32
	for _, m := range s.cfg.Moves {
		if m.Source == s.source && m.At.UnixMilli() <= int64(ms) {
			n++
		}
	}
	return n
}

// gone waits until t's rows are applied and returns the keys of its
// documents whose rows are gone, how many documents it leaves alone
// because it cannot tell, and how many live documents the table has.
func (s *Source) gone(ctx context.Context, t *table) ([]string, int64, int, error) {
	select {
	case <-t.applied:
	case <-ctx.Done():
		return nil, 0, 0, ctx.Err()
	}
	// Waiting before the listing is as good as after it: what matters is
	// that the table is asked after the wait.
	if err := s.waitWriters(ctx); err != nil {
		return nil, 0, 0, err
	}
	var gone, batch []string
	var left int64
	check := func() error {
		g, unread, err := s.absent(ctx, t, batch)
		gone, left, batch = append(gone, g...), left+unread, batch[:0]
		return err
	}
	census, err := cdc.Outdated(ctx, s.cfg.Reconcile, t.Name, s.rowVersion(time.Now()), cdc.OutdatedOptions{ClaimUnknown: s.cfg.ReconcileUnknown}, func(key string) error {
		if batch = append(batch, key); len(batch) == 1000 {
			return check()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = check()
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("reconcile %s: %w", t.Name, err)
	}
	return gone, left + int64(census.LeftAlone()), census.Live, nil
}

// waitWriters waits until none of the transactions that held a write lock
// on the tables just after the snapshot position was read is still running.
func (s *Source) waitWriters(ctx context.Context) error {
	running := s.snap.writers
	since := time.Now()
	for len(running) > 0 {
		var err error
		if running, err = writers(ctx, s.pool, s.snap.tables, running); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if len(running) == 0 {
			return nil
		}
		if time.Since(since) > 30*time.Second {
			s.cfg.Logger.WarnContext(ctx, "backfill reconciliation waits for transactions that were writing to the tables at the snapshot to end", "virtual_transactions", running)
			since = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// absent returns the keys whose rows t does not hold now, and how many
// keys it cannot look up: a key that does not split into t's id columns,
// or whose parts do not read as the columns' types.
func (s *Source) absent(ctx context.Context, t *table, keys []string) ([]string, int64, error) {
	cols := make([][]string, len(t.ID))
	var ok []string
	var unread int64
	for _, key := range keys {
		parts, split := cdc.SplitDocKey(key, len(t.ID))
		if !split {
			unread++
			continue
		}
		ok = append(ok, key)
		for i, p := range parts {
			cols[i] = append(cols[i], p)
		}
	}
	if len(ok) == 0 {
		return nil, unread, nil
	}
	arrays, names, match := make([]string, len(t.ID)), make([]string, len(t.ID)), make([]string, len(t.ID))
	args := make([]any, len(t.ID))
	for i, c := range t.ID {
		arrays[i] = fmt.Sprintf("$%d::text[]", i+1)
		names[i] = fmt.Sprintf("c%d", i)
		match[i] = fmt.Sprintf("t.%s = k.c%d::%s", pgx.Identifier{c}.Sanitize(), i, t.types[i])
		args[i] = cols[i]
	}
	q := "SELECT k.i FROM unnest(" + strings.Join(arrays, ", ") + ") WITH ORDINALITY AS k(" + strings.Join(names, ", ") + ", i)" +
		" WHERE NOT EXISTS (SELECT 1 FROM " + t.ident + " t WHERE " + strings.Join(match, " AND ") + ")"
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("look up rows: %w", err)
	}
	gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var i int64
		if err := r.Scan(&i); err != nil {
			return "", err
		}
		return ok[i-1], nil
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		// A data exception: these keys are not texts of the columns'
		// types (the documents came from elsewhere).
		return nil, unread + int64(len(ok)), nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("look up rows: %w", err)
	}
	return gone, unread, nil
}
