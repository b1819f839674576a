package cdc

import (
	"errors"
	"fmt"
)

// ErrSkip marks a message that is valid but is not a row change, so there is
// nothing to apply. Every *SkipError matches it with errors.Is.
var ErrSkip = errors.New("not a row change")

// Skip reasons carried by SkipError.Reason. They are a small fixed set, fit
// for a metric label.
const (
	SkipTombstone    = "tombstone"
	SkipTransaction  = "transaction"
	SkipSchemaChange = "schema_change"
	SkipHeartbeat    = "heartbeat"
)

// SkipError says why a message was skipped: "tombstone", "transaction",
// "schema_change" or "heartbeat".
type SkipError struct {
	Reason string
}

func (e *SkipError) Error() string { return "skip " + e.Reason + ": " + ErrSkip.Error() }

// Is makes errors.Is(err, ErrSkip) true for every SkipError.
func (e *SkipError) Is(target error) bool { return target == ErrSkip }

// DecodeError is a message that cannot be decoded. It is permanent: retrying
// the same bytes gives the same error, so callers dead-letter the message.
// Reason is a short fixed phrase (safe to show to an operator, and bounded);
// Err, when set, carries the detail (which field, which value).
type DecodeError struct {
	Coord  Coord
	Reason string
	Err    error
}

func (e *DecodeError) Error() string {
	s := fmt.Sprintf("decode %s/%d@%d: %s", e.Coord.Topic, e.Coord.Partition, e.Coord.Offset, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the detail error, if any.
func (e *DecodeError) Unwrap() error { return e.Err }

// Permanent reports true: the same input always fails the same way.
func (e *DecodeError) Permanent() bool { return true }

// Decode error reasons. Kept as constants so tests and callers compare by
// value, never by parsing Error().
const (
	reasonNotJSON   = "value is not JSON"
	reasonNotObject = "value is not a JSON object"
	reasonTooDeep   = "value is nested too deeply"
	reasonBadText   = "value is not valid UTF-8 text"
	reasonPayload   = "payload is not a JSON object"
	reasonNoOp      = "envelope has no op"
	reasonUnknownOp = "unknown op"
	reasonBadField  = "bad envelope field"
	reasonBadRow    = "bad row image"
	reasonBadValue  = "bad column value"
	reasonNoRow     = "missing row image"
	reasonNoTable   = "no table: source has no schema/table and the topic is not server.schema.table"
	reasonNoVersion = "no version: source has no lsn, binlog position, commit_lsn, scn, ord or ts_ms"
	reasonNoKey     = "no document key: set tables[].id or enable message keys"
	reasonBadKey    = "bad message key"
)
