package redisstream

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
)

// seqBits is how many low bits of an offset hold the entry id's sequence
// number; the milliseconds take the bits above. An auto-generated id
// (XADD *, what Debezium Server uses) has a sequence number below 2^20
// unless one stream took over a million entries in one millisecond, and
// milliseconds below 2^43 (the year 2248), so the offset fits in 63 bits
// and orders entries as their ids do.
const seqBits = 20

// Offset is the int64 position of a stream entry id "<ms>-<seq>" in
// cdc.Raw.Offset: ms<<20 | seq, monotone in the id for every id Redis
// generates. ok is false for a string that is not an entry id. A sequence
// number or a millisecond time too large for the encoding (only an id set
// by hand can have one) saturates its field, so the order stays monotone
// though two such ids may share an offset.
func Offset(id string) (off int64, ok bool) {
	msPart, seqPart, found := strings.Cut(id, "-")
	if !found {
		return 0, false
	}
	ms, err1 := strconv.ParseUint(msPart, 10, 64)
	seq, err2 := strconv.ParseUint(seqPart, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	ms = min(ms, 1<<(63-seqBits)-1)
	seq = min(seq, 1<<seqBits-1)
	return int64(ms<<seqBits | seq), true
}

// EntryID is the stream entry id an Offset came from (exact for every id
// Redis generates), for an operator who reads a dead letter's coordinates.
func EntryID(off int64) string {
	return strconv.FormatInt(off>>seqBits, 10) + "-" + strconv.FormatInt(off&(1<<seqBits-1), 10)
}

// Entry shapes, as the dead-letter streams record them.
const (
	formatCompact  = "compact"
	formatExtended = "extended"
)

// Field names of Debezium Server's extended format (and of a dead letter).
const (
	fieldKey   = "key"
	fieldValue = "value"
)

// raw reads an entry of stream into the record's coordinates and bytes:
// the compact shape (one field: key → value) or the extended one (key,
// value, and the headers, whose names Debezium upper-cased). The literal
// null key and null value become nil, so a tombstone's value is nil as
// the decoder expects. An entry of neither shape comes back with every
// field as a header, so its dead letter keeps all it held, and the reason.
func (s *Source) raw(stream string, m redis.XMessage) (cdc.Raw, error) {
	off, _ := Offset(m.ID)
	r := cdc.Raw{Topic: stream, Offset: off, Timestamp: timeOf(off)}
	coord := cdc.Coord{Topic: stream, Offset: off}
	_, hasKey := m.Values[fieldKey]
	_, hasValue := m.Values[fieldValue]
	switch {
	case len(m.Values) == 1:
		for k, v := range m.Values {
			r.Key, r.Value = s.nullable(k, s.cfg.NullKey), s.nullable(str(v), s.cfg.NullValue)
		}
	case hasKey && hasValue:
		r.Key, r.Value = s.nullable(str(m.Values[fieldKey]), s.cfg.NullKey), s.nullable(str(m.Values[fieldValue]), s.cfg.NullValue)
		for _, k := range slices.Sorted(maps.Keys(m.Values)) {
			if k != fieldKey && k != fieldValue {
				r.Headers = append(r.Headers, cdc.Header{Key: k, Value: []byte(str(m.Values[k]))})
			}
		}
	default:
		names := slices.Sorted(maps.Keys(m.Values))
		for _, k := range names {
			r.Headers = append(r.Headers, cdc.Header{Key: k, Value: []byte(str(m.Values[k]))})
		}
		return r, &cdc.DecodeError{Coord: coord, Reason: "entry is not in a Debezium Server Redis sink format (one field, or the fields key and value)",
			Err: fmt.Errorf("entry %s has fields %q", m.ID, names)}
	}
	return r, nil
}

// nullable is v as bytes, or nil when v is Debezium Server's null literal.
func (s *Source) nullable(v, null string) []byte {
	if v == null {
		return nil
	}
	return []byte(v)
}

// str is a field value as go-redis parsed it: a string (bulk strings are
// binary-safe, so it holds the bytes Debezium wrote).
func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// timeOf is when the entry at off was added: its id's milliseconds.
func timeOf(off int64) time.Time { return time.UnixMilli(off >> seqBits) }
