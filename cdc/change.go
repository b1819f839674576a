package cdc

import (
	"time"
)

// Op is a Debezium operation code.
type Op string

// Debezium operation codes, as in the envelope's "op" field.
const (
	OpCreate   Op = "c"
	OpUpdate   Op = "u"
	OpDelete   Op = "d"
	OpRead     Op = "r" // snapshot read
	OpTruncate Op = "t" // every document of the table is deleted
	OpMessage  Op = "m" // logical decoding message: skipped, counted
)

// Message is one record as a source hands it over, with its source
// coordinates: a Kafka record, a line of a JSONL file, or a change read
// from a replication slot or a snapshot. A transport that reads structured
// rows (the Postgres source, the backfill readers) sets Change and leaves
// Value nil; a transport that carries Debezium JSON leaves Change nil and
// the pipeline decodes Value. Value is nil for a tombstone.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64 // Kafka offset, or line number (1-based) for a file, or LSN for postgres
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// Change is the change itself when the transport produced it directly;
	// the pipeline then applies it without decoding anything.
	Change *Change
	// Err, when Change is nil, is why the transport could not build the
	// change from Value: a *DecodeError, or a *SkipError / ErrSkip for a
	// message that carries no change (a heartbeat, a tombstone). The
	// pipeline then dead-letters the message with its original bytes and
	// coordinates, or skips it, without decoding it again.
	Err error
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Change is one decoded Debezium change event.
//
// DocKey identifies the document within its table; Table is the Debezium
// source "schema.table" (MongoDB: "db.collection"). Before and After are the
// row images with Debezium's logical types decoded into plain JSON values
// (decimals as json.Number, timestamps as RFC 3339 strings, json columns
// as parsed values). Columns whose value is Debezium's unchanged-TOAST
// placeholder are absent from After and listed in Unavailable.
type Change struct {
	Op          Op             `json:"op"`
	Table       string         `json:"table"`
	DocKey      string         `json:"doc_key,omitempty"`
	Key         map[string]any `json:"key,omitempty"`
	Version     Version        `json:"version"`
	Before      map[string]any `json:"before,omitempty"`
	After       map[string]any `json:"after,omitempty"`
	Unavailable []string       `json:"unavailable,omitempty"`
	SourceTS    time.Time      `json:"source_ts"`
	TxID        string         `json:"tx_id,omitempty"`
	Snapshot    bool           `json:"snapshot,omitempty"`
	TraceParent string         `json:"traceparent,omitempty"`
	Coord       Coord          `json:"coord"`
}

// Coord names where a message came from, for errors, dead letters and commits.
type Coord struct {
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}
