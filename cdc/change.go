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

// Message is one record as a source hands it over: a Kafka record, a line of
// a JSONL file or a logical replication message rendered as Debezium JSON.
// Value is nil for a tombstone.
type Message struct {
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
