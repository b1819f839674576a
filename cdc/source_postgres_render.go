package cdc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
)

// HeaderPGVersion carries a Postgres-source change's Version (commit LSN,
// position in the transaction) as Version.String. Debezium's own source
// block orders a row by the LSN of the change record alone; the replication
// source knows the commit, which also orders a snapshot read against the
// stream, so it says so in this header and PostgresDecoder takes it.
const HeaderPGVersion = "ragsync-pg-version"

// pgRelation is what a Relation message said about a table.
type pgRelation struct {
	schema, table string
	cols          []pgColumn
}

type pgColumn struct {
	name string
	oid  uint32
	key  bool // part of the replica identity
}

// pgRow is one decoded change before its transaction committed: its
// version is not known yet.
type pgRow struct {
	op            Op
	rel           *pgRelation
	before, after map[string]any
	lsn           pglogrepl.LSN // of the change record, for coordinates
	xid           uint32        // the (sub)transaction that wrote it
}

// pgTuple decodes a tuple by the relation's column types. Unchanged TOAST
// values ('u') become Debezium's placeholder, so the decoder lists them in
// Change.Unavailable and the pipeline keeps the stored value.
func pgTuple(rel *pgRelation, t *pglogrepl.TupleData) (map[string]any, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Columns) > len(rel.cols) {
		return nil, fmt.Errorf("%s.%s: tuple has %d columns, relation %d", rel.schema, rel.table, len(t.Columns), len(rel.cols))
	}
	row := make(map[string]any, len(t.Columns))
	for i, c := range t.Columns {
		col := rel.cols[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			row[col.name] = nil
		case pglogrepl.TupleDataTypeToast:
			row[col.name] = unavailablePlaceholder
		case pglogrepl.TupleDataTypeText:
			row[col.name] = pgValueOrText(col.oid, string(c.Data))
		default:
			return nil, fmt.Errorf("%s.%s column %q: binary tuple data is not requested and not supported", rel.schema, rel.table, col.name)
		}
	}
	return row, nil
}

// pgValueOrText is pgValue, falling back to the text as Postgres wrote it
// when the text does not parse as its type (a server setting ragsync did not
// expect): the stream must not stall on one value, and text is what the
// Debezium connector gives for types it does not know.
func pgValueOrText(oid uint32, text string) any {
	v, err := pgValue(oid, text)
	if err != nil {
		return text
	}
	return v
}

// pgEvent renders a row as the Debezium PostgreSQL connector's envelope
// (payload only, no schema), so dead letters, `ragsync inspect` and the
// decoder treat it like any Debezium message.
type pgEvent struct {
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Source pgEventSource  `json:"source"`
	Op     Op             `json:"op"`
	TSMs   int64          `json:"ts_ms"`
}

type pgEventSource struct {
	Version   string `json:"version"`
	Connector string `json:"connector"`
	Name      string `json:"name"`
	TSMs      int64  `json:"ts_ms"`
	Snapshot  string `json:"snapshot"`
	DB        string `json:"db"`
	Schema    string `json:"schema"`
	Table     string `json:"table"`
	TxID      uint32 `json:"txId"`
	LSN       uint64 `json:"lsn"`
}

// pgMessage renders a change committed at commit (its transaction's commit
// record, or the snapshot's consistent point) as position pos.
func pgMessage(db, slot string, r pgRow, commit pglogrepl.LSN, pos uint64, ts time.Time, snapshot bool) (Message, error) {
	ev := pgEvent{
		Before: r.before,
		After:  r.after,
		Op:     r.op,
		TSMs:   time.Now().UnixMilli(),
		Source: pgEventSource{
			Version: "ragsync", Connector: "postgresql", Name: slot, TSMs: ts.UnixMilli(),
			Snapshot: strconv.FormatBool(snapshot), DB: db, Schema: r.rel.schema, Table: r.rel.table,
			TxID: r.xid, LSN: uint64(r.lsn),
		},
	}
	val, err := json.Marshal(ev)
	if err != nil {
		return Message{}, fmt.Errorf("render %s.%s@%s: %w", r.rel.schema, r.rel.table, r.lsn, err)
	}
	var key []byte
	if r.op != OpTruncate {
		src := r.after
		if src == nil {
			src = r.before
		}
		k := map[string]any{}
		for _, c := range r.rel.cols {
			if v, ok := src[c.name]; c.key && ok {
				k[c.name] = v
			}
		}
		if len(k) > 0 {
			if key, err = json.Marshal(k); err != nil {
				return Message{}, fmt.Errorf("render key %s.%s@%s: %w", r.rel.schema, r.rel.table, r.lsn, err)
			}
		}
	}
	v := Version{Kind: KindPostgres, Parts: []uint64{uint64(commit), pos}}
	return Message{
		Topic:     slot + "." + r.rel.schema + "." + r.rel.table,
		Offset:    int64(r.lsn),
		Key:       key,
		Value:     val,
		Headers:   []Header{{Key: HeaderPGVersion, Value: []byte(v.String())}},
		Timestamp: ts,
	}, nil
}

// PostgresDecoder decodes the messages of a PostgresSource: the Debezium
// decoder's Change, with the Version from HeaderPGVersion when present.
// Messages without the header (a replayed dead letter from Kafka) keep the
// Debezium decoder's version. Safe for concurrent use.
type PostgresDecoder struct {
	*Decoder
}

// Decode decodes m.
func (d PostgresDecoder) Decode(m Message) (Change, error) {
	ch, err := d.Decoder.Decode(m)
	if err != nil {
		return ch, err
	}
	for _, h := range m.Headers {
		if h.Key != HeaderPGVersion {
			continue
		}
		v, err := ParseVersion(string(h.Value))
		if err != nil || v.Kind != KindPostgres {
			return Change{}, &DecodeError{Coord: ch.Coord, Reason: reasonBadField, Err: fmt.Errorf("header %s: %q is not a pg version", HeaderPGVersion, h.Value)}
		}
		ch.Version = v
	}
	return ch, nil
}
