package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ragsync/ragsync/cdc"
)

// relation is what a Relation message said about a table, with how
// tables[] identifies its documents.
type relation struct {
	schema, table string
	name          string // Change.Table
	cols          []column
	matched       bool
	ids           []string // document id columns
}

type column struct {
	name string
	oid  uint32
	key  bool // part of the replica identity, as pgoutput flags it
}

// item is one change ready for Fetch, or (marker) only the end of a
// transaction whose changes were all handed over before its commit came.
type item struct {
	m      cdc.Record
	end    pglogrepl.LSN // the transaction's end LSN if this is its last item, else 0
	bytes  int
	marker bool
}

// openTx is the transaction being received. The server decodes only
// committed transactions (no streaming of transactions in progress is
// requested), so Begin already carries the commit LSN and time: every row
// is versioned, and can be handed over, as it arrives.
type openTx struct {
	commit  pglogrepl.LSN
	xid     uint32
	ts      time.Time
	pos     uint64 // the next change's position in the transaction
	inReady int    // its items still in ready
	handed  bool   // some of its items were handed over already
}

// streamState is what one replication connection knows. It is rebuilt on
// every reconnect: the server resends from the confirmed position, so
// nothing half-received may survive a reconnect.
type streamState struct {
	rels       map[uint32]*relation
	tx         *openTx
	ready      []item
	committed  int // leading items of ready whose transaction committed
	readyBytes int
	walEnd     pglogrepl.LSN // the server's position, from keepalives and data
}

// stream runs START_REPLICATION from start and moves changes to Fetch until
// ctx ends or the connection fails.
func (s *Source) stream(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// No "streaming 'on'": like Debezium's connector, ragsync lets the
		// server decode a transaction once it committed. Its rows are then
		// final as they arrive and go to the pipeline at once, so memory
		// stays within MaxBufferBytes whatever the transaction's size;
		// streamed transactions would have to be held (or spilled) until
		// their commit, since they may still abort.
		PluginArgs: []string{
			"proto_version '2'",
			fmt.Sprintf("publication_names '%s'", s.cfg.Publication),
		},
	})
	if err != nil {
		return s.classify(ctx, fmt.Errorf("start replication at %s: %w", start, err))
	}
	st := &streamState{rels: map[uint32]*relation{}}
	confirmed := start
	nextStatus := time.Now()
	var probed time.Time
	batchBytes := max(s.cfg.MaxBufferBytes/4, 1)
	for {
		// Hand over what is ready as soon as Fetch can take it: whole
		// committed transactions, or full batches of the open one. Only
		// this goroutine sends, so room in the channel means the send
		// won't block.
		for len(s.out) < cap(s.out) {
			limit := st.committed
			if limit == 0 && (len(st.ready) >= s.cfg.BatchSize || st.readyBytes >= batchBytes) {
				limit = len(st.ready)
			}
			if limit == 0 {
				break
			}
			s.out <- fetched{b: s.handOver(st, limit, batchBytes)}
		}
		// Nothing in flight, nothing half-read: every relevant change
		// before the server's position is in the sink, so confirm that
		// position too, or an idle or filtered-out slot would retain WAL
		// for ever.
		idle := len(st.ready) == 0 && s.unacked.Load() == 0 && st.tx == nil
		if idle && st.walEnd > pglogrepl.LSN(s.acked.Load()) {
			s.advance(st.walEnd)
		}
		acked := pglogrepl.LSN(s.acked.Load())
		if s.cfg.StopAtEnd && idle && st.walEnd >= s.stopAt {
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
		if idle && time.Since(probed) >= watermarkProbe {
			// Ask the server where it is: its answer (a keepalive) moves
			// the idle slot's position, and with it the watermark, past
			// WAL that carried nothing for the publication, such as the
			// commit a reader got from pg_current_wal_lsn().
			probed = time.Now()
			confirmed = max(confirmed, acked)
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: confirmed, WALFlushPosition: confirmed, WALApplyPosition: confirmed, ReplyRequested: true,
			}); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
		}
		wait := time.Until(nextStatus)
		if len(st.ready) > 0 {
			wait = min(wait, 10*time.Millisecond)
		}
		if idle {
			wait = min(wait, max(time.Until(probed.Add(watermarkProbe)), time.Millisecond))
		}
		if st.readyBytes >= s.cfg.MaxBufferBytes || len(st.ready) >= 4*s.cfg.BatchSize {
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
			return s.classify(ctx, pgconn.ErrorResponseToPgError(msg))
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

// handOver takes up to BatchSize items (and about batchBytes) of the first
// limit items of ready as a batch.
func (s *Source) handOver(st *streamState, limit, batchBytes int) cdc.Batch {
	n, size := 0, 0
	for n < limit && n < s.cfg.BatchSize && (n == 0 || size+st.ready[n].bytes <= batchBytes) {
		size += st.ready[n].bytes
		n++
	}
	msgs := make([]cdc.Record, 0, n)
	var upTo pglogrepl.LSN
	for _, it := range st.ready[:n] {
		if !it.marker {
			msgs = append(msgs, it.m)
		}
		upTo = max(upTo, it.end)
	}
	clear(st.ready[:n]) // let the handed-over rows go
	st.ready = st.ready[n:]
	st.readyBytes -= size
	st.committed = max(st.committed-n, 0)
	if st.tx != nil {
		if open := len(st.ready) - st.committed; open < st.tx.inReady {
			st.tx.inReady, st.tx.handed = open, true
		}
	}
	return s.batch(msgs, upTo, nil)
}

// errStopAtEnd ends streaming for StopAtEnd.
var errStopAtEnd = errors.New("caught up")

// classify turns the server's errors that reconnecting cannot fix into a
// SourceError naming what happened and the recovery. The same SQLSTATE
// (42704, undefined_object) means a dropped slot or a dropped publication,
// so the catalog is asked which one is gone.
func (s *Source) classify(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "42704": // undefined_object
		slotGone, pubGone := s.whatIsGone(ctx)
		switch {
		case pubGone:
			return &SourceError{msg: fmt.Sprintf("publication %q was dropped (%v), and slot %q cannot decode without it, even if it is created again (Postgres reads the publication as of each change's position): run `ragsync slot drop --config <file>` (add --force if ragsync did not create the slot), then start serve again, which creates the publication and the slot and loads the tables again", s.cfg.Publication, pe.Message, s.cfg.Slot)}
		case slotGone:
			return &SourceError{msg: fmt.Sprintf("replication slot %q was dropped outside ragsync (%v): start serve again, which creates it and loads the tables again (the load removes documents whose rows were deleted meanwhile)", s.cfg.Slot, pe.Message)}
		}
	case "55000": // object_not_in_prerequisite_state: invalidated, wal removed
		return &SourceError{msg: fmt.Sprintf("replication slot %q can no longer be used (%v): run `ragsync slot drop --config <file>` and start serve again, which recreates the slot and loads the tables again; raise max_slot_wal_keep_size so it does not happen again", s.cfg.Slot, pe.Message)}
	case "42501", "28000": // insufficient_privilege, invalid_authorization
		return &SourceError{msg: fmt.Sprintf("the source refused ragsync's role (%v): it needs REPLICATION (ALTER ROLE <role> REPLICATION) and SELECT on the tables (GRANT SELECT ON <table> TO <role>); grant them and start serve again, which resumes where it stopped", pe.Message)}
	}
	return err
}

// whatIsGone asks the catalog whether the slot and the publication exist.
// If it cannot tell, it says neither is gone.
func (s *Source) whatIsGone(ctx context.Context) (slotGone, pubGone bool) {
	conn, err := s.connectSQL(ctx)
	if err != nil {
		return false, false
	}
	defer conn.Close(context.Background())
	var slot, pub bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2)`, s.cfg.Slot, s.cfg.Publication).Scan(&slot, &pub); err != nil {
		return false, false
	}
	return !slot, !pub
}

// handle decodes one pgoutput message.
func (s *Source) handle(st *streamState, x pglogrepl.XLogData) error {
	st.walEnd = max(st.walEnd, x.ServerWALEnd)
	m, err := pglogrepl.ParseV2(x.WALData, false)
	if err != nil {
		return fmt.Errorf("parse pgoutput at %s: %w", x.WALStart, err)
	}
	rel := func(id uint32) (*relation, error) {
		r, ok := st.rels[id]
		if !ok {
			return nil, fmt.Errorf("change at %s for relation %d before its Relation message", x.WALStart, id)
		}
		return r, nil
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessageV2:
		st.rels[m.RelationID] = s.relation(m)
	case *pglogrepl.BeginMessage:
		st.tx = &openTx{commit: m.FinalLSN, xid: m.Xid, ts: m.CommitTime}
	case *pglogrepl.CommitMessage:
		tx := st.tx
		if tx == nil {
			return fmt.Errorf("commit at %s without begin", x.WALStart)
		}
		st.tx = nil
		switch {
		case tx.inReady > 0:
			st.ready[len(st.ready)-1].end = m.TransactionEndLSN
		case tx.handed:
			st.ready = append(st.ready, item{marker: true, end: m.TransactionEndLSN})
		default:
			// Nothing published in it: it only moves the position,
			// confirmed when the source is idle.
			st.walEnd = max(st.walEnd, m.TransactionEndLSN)
			return nil
		}
		st.committed = len(st.ready)
		s.lag.add(m.TransactionEndLSN, m.CommitTime)
	case *pglogrepl.InsertMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		return s.row(st, x.WALStart, r, cdc.OpCreate, nil, m.Tuple)
	case *pglogrepl.UpdateMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		return s.row(st, x.WALStart, r, cdc.OpUpdate, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessageV2:
		r, err := rel(m.RelationID)
		if err != nil {
			return err
		}
		return s.row(st, x.WALStart, r, cdc.OpDelete, m.OldTuple, nil)
	case *pglogrepl.TruncateMessageV2:
		for _, id := range m.RelationIDs {
			r, err := rel(id)
			if err != nil {
				return err
			}
			if err := s.add(st, x.WALStart, cdc.Change{Op: cdc.OpTruncate, Table: r.name}, r, 0); err != nil {
				return err
			}
		}
	case *pglogrepl.StreamStartMessageV2, *pglogrepl.StreamStopMessageV2, *pglogrepl.StreamCommitMessageV2, *pglogrepl.StreamAbortMessageV2:
		return fmt.Errorf("pgoutput at %s: a streamed transaction, which ragsync does not ask for", x.WALStart)
	}
	return nil
}

// relation records a Relation message with how tables[] identifies the
// table's documents: tables[].id, else the primary key read at setup; a
// table published after setup falls back on the replica identity's
// columns as pgoutput flags them.
func (s *Source) relation(m *pglogrepl.RelationMessageV2) *relation {
	r := &relation{schema: m.Namespace, table: m.RelationName, name: cdc.TableName(m.Namespace, m.RelationName)}
	var flagged []string
	for _, c := range m.Columns {
		key := c.Flags&1 != 0
		r.cols = append(r.cols, column{name: c.Name, oid: c.DataType, key: key})
		if key {
			flagged = append(flagged, c.Name)
		}
	}
	_, r.matched = cdc.LookupTable(s.cfg.Tables, r.name)
	if r.matched {
		names := make([]string, len(r.cols))
		for i, c := range r.cols {
			names[i] = c.name
		}
		s.warnMissingColumns(r.schema, r.table, r.name, names)
	}
	pk := flagged
	if m.ReplicaIdentity == 'f' {
		pk = nil
	}
	if t := s.tables[relKey(m.Namespace, m.RelationName)]; t != nil {
		pk = t.pk
	}
	r.ids = idColumns(s.cfg.Tables, r.name, pk)
	return r
}

// row turns one row change into changes: a key-changing update becomes a
// delete of the old document and a create of the new one, as Debezium's
// connector emits it.
func (s *Source) row(st *streamState, lsn pglogrepl.LSN, r *relation, op cdc.Op, oldT, newT *pglogrepl.TupleData) error {
	size := tupleBytes(oldT) + tupleBytes(newT)
	if !r.matched {
		// Not in tables[]: the pipeline counts it unmatched_table; its
		// values are not even decoded.
		return s.add(st, lsn, cdc.Change{Op: op, Table: r.name}, r, size)
	}
	before, _, err := tuple(r, oldT)
	if err != nil {
		return err
	}
	after, unavailable, err := tuple(r, newT)
	if err != nil {
		return err
	}
	if before != nil && len(unavailable) > 0 {
		// REPLICA IDENTITY FULL: the old row carries the unchanged TOAST
		// values in full (Postgres flattens it), so nothing is missing.
		var still []string
		for _, c := range unavailable {
			if v, ok := before[c]; ok && v != unavailableValue {
				after[c] = v
			} else {
				still = append(still, c)
			}
		}
		unavailable = still
	}
	for _, c := range unavailable {
		delete(after, c)
	}
	ch := cdc.Change{Op: op, Table: r.name, Before: before, After: after, Unavailable: unavailable}
	switch op {
	case cdc.OpDelete:
		if ch.DocKey, ch.Key = rowKey(r.ids, before); ch.DocKey == "" {
			return s.noKey(r, lsn, "delete")
		}
	case cdc.OpCreate:
		if ch.DocKey, ch.Key = rowKey(r.ids, after); ch.DocKey == "" {
			return s.noKey(r, lsn, "insert")
		}
	case cdc.OpUpdate:
		if ch.DocKey, ch.Key = rowKey(r.ids, after); ch.DocKey == "" {
			return s.noKey(r, lsn, "update")
		}
		if oldKey, key := rowKey(r.ids, before); oldKey != "" && oldKey != ch.DocKey {
			del := cdc.Change{Op: cdc.OpDelete, Table: r.name, DocKey: oldKey, Key: key, Before: before}
			if err := s.add(st, lsn, del, r, size/2); err != nil {
				return err
			}
			ch.Op, ch.Before = cdc.OpCreate, nil
		}
	}
	return s.add(st, lsn, ch, r, size)
}

// noKey stops the source: a change of a tables[] table without its
// document id means the replica identity changed after the checks passed.
func (s *Source) noKey(r *relation, lsn pglogrepl.LSN, what string) error {
	name := pgx.Identifier{r.schema, r.table}.Sanitize()
	return &SourceError{msg: fmt.Sprintf("table %s: the %s at %s carries no document id (columns %v): its replica identity changed after serve started; run ALTER TABLE %s REPLICA IDENTITY FULL, then `ragsync slot drop --config <file>` and start serve again, which loads the tables again", name, what, lsn, r.ids, name)}
}

// rowKey is the document key of row by cols ("" when row lacks one).
func rowKey(cols []string, row map[string]any) (string, map[string]any) {
	k, key, ok := cdc.RowKey(cols, row)
	if !ok {
		return "", nil
	}
	return k, key
}

// add queues one change of the open transaction, versioned by its commit
// LSN and position.
func (s *Source) add(st *streamState, lsn pglogrepl.LSN, ch cdc.Change, r *relation, size int) error {
	tx := st.tx
	if tx == nil {
		return fmt.Errorf("change at %s outside a transaction", lsn)
	}
	ts := time.UnixMilli(tx.ts.UnixMilli()).UTC()
	ch.Version = cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(tx.commit), tx.pos}, TS: uint64(max(ts.UnixMilli(), 0)), Source: s.source}
	ch.TxID = strconv.FormatUint(uint64(tx.xid), 10)
	ch.Coord = cdc.Coord{Topic: s.cfg.Slot + "." + r.schema + "." + r.table, Offset: int64(lsn)}
	tx.pos++
	st.ready = append(st.ready, item{m: message(ch, tx.ts), bytes: size + 256})
	st.readyBytes += size + 256
	tx.inReady++
	return nil
}

// message wraps a change with its coordinates.
func message(ch cdc.Change, ts time.Time) cdc.Record {
	c := ch
	return cdc.Record{Raw: cdc.Raw{Topic: ch.Coord.Topic, Partition: ch.Coord.Partition, Offset: ch.Coord.Offset, Timestamp: ts}, Change: &c}
}

func tupleBytes(t *pglogrepl.TupleData) int {
	if t == nil {
		return 0
	}
	n := 0
	for _, c := range t.Columns {
		n += len(c.Data) + 16
	}
	return n
}

// unavailableValue marks an unchanged TOAST column inside tuple's result.
const unavailableValue = "__debezium_unavailable_value"

// tuple decodes a tuple by the relation's column types. Unchanged TOAST
// values ('u') are listed in unavailable (and hold unavailableValue).
func tuple(r *relation, t *pglogrepl.TupleData) (row map[string]any, unavailable []string, err error) {
	if t == nil {
		return nil, nil, nil
	}
	if len(t.Columns) > len(r.cols) {
		return nil, nil, fmt.Errorf("%s.%s: tuple has %d columns, relation %d", r.schema, r.table, len(t.Columns), len(r.cols))
	}
	row = make(map[string]any, len(t.Columns))
	for i, c := range t.Columns {
		col := r.cols[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			row[col.name] = nil
		case pglogrepl.TupleDataTypeToast:
			row[col.name] = unavailableValue
			unavailable = append(unavailable, col.name)
		case pglogrepl.TupleDataTypeText:
			row[col.name] = cdc.PostgresValue(col.oid, string(c.Data))
		default:
			return nil, nil, fmt.Errorf("%s.%s column %q: binary tuple data is not requested and not supported", r.schema, r.table, col.name)
		}
	}
	return row, unavailable, nil
}
