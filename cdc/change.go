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

// Record is what a source hands the pipeline: a decoded change, or the
// reason there is none, with the bytes it came from. Every transport
// decodes as it hands over (Kafka and the file source through the Debezium
// Decoder, the Postgres source and the backfill readers build changes
// directly), so the pipeline never parses anything. Exactly one of Change
// and Err is set.
type Record struct {
	// Raw is where the record came from and, for a transport that carries
	// Debezium JSON, its original bytes and headers, which a dead letter
	// keeps as they were. A structured transport sets only the coordinates.
	Raw
	// Change is the change the record carries.
	Change *Change
	// Err, when Change is nil, is why the transport could not build the
	// change: a *DecodeError, or a *SkipError / ErrSkip for a record that
	// carries no change (a heartbeat, a tombstone). The pipeline then
	// dead-letters the record with its original bytes and coordinates, or
	// skips it, without decoding it again.
	Err error
}

// Raw is a record as its transport read it: its coordinates, and the key,
// value and headers of a transport that carries bytes (Value is nil for a
// tombstone, and for a change a structured transport built directly).
type Raw struct {
	Topic     string
	Partition int32
	Offset    int64 // Kafka offset, or line number (1-based) for a file, or LSN for postgres
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
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
	TxID        string         `json:"tx_id,omitempty"`
	TraceParent string         `json:"traceparent,omitempty"`
	Coord       Coord          `json:"coord"`
}

// Coord names where a message came from, for errors, dead letters and commits.
type Coord struct {
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}
