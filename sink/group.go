package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// groupCommit lets concurrent Upserts share transactions (see sharing):
// an Upsert queues its document and either waits for its result or, when a
// group may start, takes every queued document (up to 32, one per
// document, so each document's changes commit in order) and writes them
// together. A document alone is written as it always was.
//
// A group costs the same two round trips as one document: one batch opens
// the transaction and reads every document's stored state under its row
// lock (rows locked in id order, so two groups never wait on each other in
// a cycle), the other writes them all and commits. What a group saves is
// Postgres's work per transaction and per round trip (BEGIN, COMMIT and
// its WAL flush, a batch's reception), and one insert statement for every
// new vector of the group. bench/pgcost priced BEGIN and COMMIT at 0.4 ms
// of backend CPU per 4 KB document, a few percent of its write.
//
// Every guarantee of a single Upsert holds per document: each is fenced
// against its own stored version and its stale chunks go in the same
// transaction as its new ones. A document whose change is stale or whose
// cached vector vanished gets its own outcome or error without holding the
// others back. If the group's transaction fails (a concurrent writer
// created one of its documents, a deadlock with another writer), it rolls
// back and each document is written alone, with Upsert's retries, so one
// bad document never fails another.
type groupCommit = sharing[*upsertRequest]

// upsertRequest is one queued Upsert.
type upsertRequest struct {
	ctx  context.Context
	id   string
	d    Document
	done chan struct{}
	out  Outcome
	err  error
}

// newGroupCommit shares transactions among up to max documents, groups
// slots at a time (the rest of the pool's connections stay free for the
// reads that precede a write and for queries); nil writes each alone.
func newGroupCommit(groups, max int) *groupCommit {
	return newSharing(groups, max, func(r *upsertRequest) string { return r.id })
}

// upsertGrouped queues the document and waits for its result (see
// sharing.join).
func (s *Store) upsertGrouped(ctx context.Context, id string, d Document) (Outcome, error) {
	r := &upsertRequest{ctx: ctx, id: id, d: d, done: make(chan struct{})}
	if !s.group.join(ctx, r, r.done, s.writeGroup) {
		return Outcome{}, ctx.Err()
	}
	return r.out, r.err
}

// writeGroup writes batch and completes every request in it.
func (s *Store) writeGroup(ctx context.Context, batch []*upsertRequest) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) > 1 {
		slices.SortFunc(batch, func(a, b *upsertRequest) int { return cmp.Compare(a.id, b.id) })
		err := s.upsertGroup(ctx, batch)
		if err == nil {
			return
		}
		s.logger.DebugContext(ctx, "group write rolled back; writing its documents one by one", "documents", len(batch), "error", err)
		s.metrics.groupFallbacks.Inc()
	}
	for _, r := range batch {
		r.out, r.err = s.upsertAlone(r.ctx, r.id, r.d)
	}
}

// upsertGroup writes batch (sorted by id, one request per document) in one
// transaction and fills in each request's result; an error means the
// transaction rolled back and no request has a result.
func (s *Store) upsertGroup(ctx context.Context, batch []*upsertRequest) (err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer rollbackOpen(ctx, conn.Conn(), &err)

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	queued := make([]queuedRead, len(batch))
	for i, r := range batch {
		queued[i] = s.queueRead(b, r.id, r.d, i > 0)
	}
	br := conn.SendBatch(ctx, b)
	reads := make([]upsertRead, len(batch))
	_, err = br.Exec()
	for i := 0; err == nil && i < len(batch); i++ {
		reads[i], err = s.scanRead(br, batch[i].d, queued[i])
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}

	outs := make([]Outcome, len(batch))
	errs := make([]error, len(batch))
	writes := make([]*write, len(batch))
	for i, r := range batch {
		w, out, err := s.decide(ctx, conn, r.id, r.d, reads[i])
		switch {
		case errors.Is(err, ErrMissingVector) || errors.Is(err, ErrOriginGone):
			// This document's own fault: the others go on.
			errs[i] = err
		case err != nil:
			return err
		}
		writes[i], outs[i] = w, out
	}
	wb := &pgx.Batch{}
	var given []docChunk
	for _, w := range writes {
		if w != nil {
			given = append(given, w.queue(s, wb)...)
		}
	}
	s.queueGiven(wb, given)
	wb.Queue("COMMIT")
	if err := conn.SendBatch(ctx, wb).Close(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	for i, r := range batch {
		if writes[i] != nil {
			outs[i] = writes[i].outcome()
		}
		r.out, r.err = s.finishUpsert(r.id, r.d, outs[i], errs[i])
	}
	s.metrics.groupSize.Observe(float64(len(batch)))
	return nil
}
