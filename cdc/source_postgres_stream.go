package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// pgTx is a transaction being assembled: in order, begin to commit.
type pgTx struct {
	xid  uint32
	rows []pgRow
}

// streamState is what one replication connection knows. It is rebuilt on
// every reconnect: the server resends from the confirmed position, so
// nothing half-assembled may survive a reconnect.
type streamState struct {
	rels     map[uint32]*pgRelation
	tx       *pgTx            // the open non-streamed transaction
	streams  map[uint32]*pgTx // streamed transactions by top-level xid
	inStream bool
	streamX  uint32 // xid of the open stream segment
	ready    []Message
	readyEnd []pglogrepl.LSN // per ready message: a tx end LSN if it is its tx's last, else 0
	walEnd   pglogrepl.LSN   // the server's position, from keepalives and data
}

// stream runs START_REPLICATION from start and moves changes to Fetch until
// ctx ends or the connection fails.
func (s *PostgresSource) stream(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '2'",
			fmt.Sprintf("publication_names '%s'", s.cfg.Publication),
			// Large transactions come in segments as they are written
			// instead of spilling to the server's disk until commit.
			"streaming 'on'",
		},
	})
	if err != nil {
		return s.classify(fmt.Errorf("start replication at %s: %w", start, err))
	}
	st := &streamState{rels: map[uint32]*pgRelation{}, streams: map[uint32]*pgTx{}}
	confirmed := start
	nextStatus := time.Now()
	highWater := 4 * s.cfg.BatchSize
	for {
		// Hand over what is ready as soon as Fetch can take it. Only this
		// goroutine sends, so room in the channel means the send won't block.
		for len(st.ready) > 0 && len(s.out) < cap(s.out) {
			n := min(len(st.ready), s.cfg.BatchSize)
			var upTo pglogrepl.LSN
			for _, e := range st.readyEnd[:n] {
				upTo = max(upTo, e)
			}
			s.out <- fetched{b: s.batch(slices.Clone(st.ready[:n]), upTo, nil)}
			st.ready, st.readyEnd = st.ready[n:], st.readyEnd[n:]
		}
		// Nothing in flight, nothing half-read: every relevant change
		// before the server's position is in the sink, so confirm that
		// position too, or an idle or filtered-out slot would retain WAL
		// for ever.
		acked := pglogrepl.LSN(s.acked.Load())
		if len(st.ready) == 0 && s.unacked.Load() == 0 && st.tx == nil && len(st.streams) == 0 && st.walEnd > acked {
			for {
				cur := s.acked.Load()
				if uint64(st.walEnd) <= cur || s.acked.CompareAndSwap(cur, uint64(st.walEnd)) {
					break
				}
			}
			acked = pglogrepl.LSN(s.acked.Load())
		}
		if s.cfg.StopAtEnd && len(st.ready) == 0 && s.unacked.Load() == 0 && st.tx == nil && len(st.streams) == 0 && st.walEnd >= s.stopAt {
			_ = pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: acked, WALFlushPosition: acked, WALApplyPosition: acked,
			})
			return errStopAtEnd
		}
		if acked > confirmed || !time.Now().Before(nextStatus) {
			confirmed = max(confirmed, acked)
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: confirmed, WALFlushPosition: confirmed, WALApplyPosition: confirmed,
			}); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}
		wait := time.Until(nextStatus)
		if len(st.ready) > 0 {
			wait = min(wait, 10*time.Millisecond)
		}
		if len(st.ready) >= highWater {
			// Back-pressure: stop reading, keep the status flowing.
			select {
			case <-ctx.Done():
				return nil
			case <-s.ackNow:
			case <-time.After(wait):
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return s.classify(pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("parse keepalive: %w", err)
				}
				st.walEnd = max(st.walEnd, ka.ServerWALEnd)
				if ka.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("parse xlogdata: %w", err)
				}
				if err := s.handle(st, x); err != nil {
					return err
				}
			}
		}
	}
}

// errStopAtEnd ends streaming for StopAtEnd.
var errStopAtEnd = errors.New("caught up")

// classify turns the server's slot errors into slotError (reconnecting
// will not help) with the fix.
func (s *PostgresSource) classify(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "42704": // undefined_object: the slot was dropped
		return &slotError{msg: fmt.Sprintf("replication slot %q does not exist (dropped outside ragsync?): restart serve to recreate it and reload the tables; changes made meanwhile that deleted rows may linger in the index until their documents change (%v)", s.cfg.Slot, err)}
	case "55000": // object_not_in_prerequisite_state: invalidated, wal removed
		return &slotError{msg: fmt.Sprintf("replication slot %q can no longer be used (%v): run `ragsync slot drop` and restart serve, which recreates the slot and reloads the tables; raise max_slot_wal_keep_size so it does not happen again", s.cfg.Slot, pe.Message)}
	}
	return err
}

// handle decodes one pgoutput message.
func (s *PostgresSource) handle(st *streamState, x pglogrepl.XLogData) error {
	st.walEnd = max(st.walEnd, x.ServerWALEnd)
	m, err := pglogrepl.ParseV2(x.WALData, st.inStream)
	if err != nil {
		return fmt.Errorf("parse pgoutput at %s: %w", x.WALStart, err)
	}
	// add appends a row to the transaction it belongs to.
	add := func(r pgRow) error {
		r.lsn = x.WALStart
		switch {
		case st.inStream:
			tx := st.streams[st.streamX]
			if tx == nil {
				return fmt.Errorf("change at %s outside a stream", x.WALStart)
			}
			tx.rows = append(tx.rows, r)
		case st.tx != nil:
			r.xid = st.tx.xid
			st.tx.rows = append(st.tx.rows, r)
		default:
			return fmt.Errorf("change at %s outside a transaction", x.WALStart)
		}
		return nil
	}
	rel := func(id uint32) (*pgRelation, error) {
		r, ok := st.rels[id]
		if !ok {
			return nil, fmt.Errorf("change at %s for relation %d before its Relation message", x.WALStart, id)
		}
		return r, nil
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessageV2:
		r := &pgRelation{schema: m.Namespace, table: m.RelationName}
		// The message key is the primary key, as Debezium's. pgoutput flags
		// the replica identity instead, which under REPLICA IDENTITY FULL
		// is every column: no key then (tables[].id names it).
		pk, known := s.pkeys[m.Namespace+"."+m.RelationName]
		for _, c := range m.Columns {
			key := c.Flags&1 != 0 && m.ReplicaIdentity != 'f'
			if known {
				key = contains(pk, c.Name)
			}
			r.cols = append(r.cols, pgColumn{name: c.Name, oid: c.DataType, key: key})
		}
		st.rels[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		st.tx = &pgTx{xid: m.Xid}
	case *pglogrepl.CommitMessage:
		if st.tx == nil {
			return fmt.Errorf("commit at %s without begin", x.WALStart)
		}
		if err := s.commit(st, st.tx, m.CommitLSN, m.TransactionEndLSN, m.CommitTime); err != nil {
			return err
		}
		st.tx = nil
	case *pglogrepl.StreamStartMessageV2:
		st.inStream, st.streamX = true, m.Xid
		if st.streams[m.Xid] == nil {
			st.streams[m.Xid] = &pgTx{xid: m.Xid}
		}
	case *pglogrepl.StreamStopMessageV2:
		st.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		tx := st.streams[m.Xid]
		delete(st.streams, m.Xid)
		if tx == nil {
			tx = &pgTx{xid: m.Xid} // nothing published was in it
		}
		return s.commit(st, tx, m.CommitLSN, m.TransactionEndLSN, m.CommitTime)
	case *pglogrepl.StreamAbortMessageV2:
		if m.Xid == m.SubXid {
			delete(st.streams, m.Xid)
			break
		}
		// A rolled-back subtransaction (savepoint): drop only its rows.
		if tx := st.streams[m.Xid]; tx != nil {
			tx.rows = slices.DeleteFunc(tx.rows, func(r pgRow) bool { return r.xid == m.SubXid })
		}
	case *pglogrepl.InsertMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		after, err := pgTuple(r, m.Tuple)
		if err != nil {
			return err
		}
		return add(pgRow{op: OpCreate, rel: r, after: after, xid: m.Xid})
	case *pglogrepl.UpdateMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		before, err := pgTuple(r, m.OldTuple)
		if err != nil {
			return err
		}
		after, err := pgTuple(r, m.NewTuple)
		if err != nil {
			return err
		}
		return add(pgRow{op: OpUpdate, rel: r, before: before, after: after, xid: m.Xid})
	case *pglogrepl.DeleteMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		before, err := pgTuple(r, m.OldTuple)
		if err != nil {
			return err
		}
		return add(pgRow{op: OpDelete, rel: r, before: before, xid: m.Xid})
	case *pglogrepl.TruncateMessageV2:
		for _, id := range m.RelationIDs {
			r, err := rel(id)
			if err != nil {
				return err
			}
			if err := add(pgRow{op: OpTruncate, rel: r, xid: m.Xid}); err != nil {
				return err
			}
		}
	}
	return nil
}

// commit renders a committed transaction's rows, versioned by the commit
// LSN and their position, and queues them for Fetch. Its last message
// carries the transaction's end LSN: acknowledging it confirms the whole
// transaction.
func (s *PostgresSource) commit(st *streamState, tx *pgTx, commit, end pglogrepl.LSN, ts time.Time) error {
	for i, r := range tx.rows {
		r.xid = tx.xid // subtransactions report their top-level xid, as Debezium does
		m, err := pgMessage(s.db, s.cfg.Slot, r, commit, uint64(i), ts, false)
		if err != nil {
			return err
		}
		st.ready = append(st.ready, m)
		st.readyEnd = append(st.readyEnd, 0)
	}
	if len(tx.rows) == 0 {
		// An empty transaction still moves the confirmable position.
		if len(st.readyEnd) == 0 {
			st.walEnd = max(st.walEnd, end)
			return nil
		}
	}
	st.readyEnd[len(st.readyEnd)-1] = max(st.readyEnd[len(st.readyEnd)-1], end)
	s.lag.add(end, ts)
	return nil
}
