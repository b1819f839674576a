package cdc

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Dead-letter headers use Kafka Connect's names (errors.deadletterqueue.
// context.headers.enable), so tooling that reads Connect's dead letters reads
// ragsync's too.
const (
	HeaderErrTopic     = "__connect.errors.topic"
	HeaderErrPartition = "__connect.errors.partition"
	HeaderErrOffset    = "__connect.errors.offset"
	HeaderErrClass     = "__connect.errors.exception.class.name"
	HeaderErrMessage   = "__connect.errors.exception.message"
	HeaderErrStage     = "__connect.errors.stage"
	HeaderErrTimestamp = "__connect.errors.timestamp"
	HeaderVersion      = "ragsync.version"
)

// ErrorClass names the kind of a failure for the dead-letter headers.
func ErrorClass(err error) string {
	var de *DecodeError
	switch {
	case errors.As(err, &de):
		return "ragsync.cdc.DecodeError"
	default:
		return "ragsync.pipeline.ApplyError"
	}
}

// DeadLetterHeaders returns the headers a dead letter of m carries: the
// original headers followed by the reason, cause, and the ragsync version
// that set it aside. Every transport's dead-letter store writes these.
// __connect.errors.timestamp is the message's timestamp, or, for a message
// that has none (a bare line of a file), the time it was dead-lettered:
// the zero time would read as year 1.
func DeadLetterHeaders(m Record, cause error, version string) []Header {
	ts := m.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	hs := append([]Header(nil), m.Headers...)
	stage := "VALUE_CONVERTER"
	var de *DecodeError
	if !errors.As(cause, &de) {
		stage = "TASK_PUT"
	}
	return append(hs,
		Header{HeaderErrTopic, []byte(m.Topic)},
		Header{HeaderErrPartition, []byte(strconv.Itoa(int(m.Partition)))},
		Header{HeaderErrOffset, []byte(strconv.FormatInt(m.Offset, 10))},
		Header{HeaderErrClass, []byte(ErrorClass(cause))},
		Header{HeaderErrMessage, []byte(cause.Error())},
		Header{HeaderErrStage, []byte(stage)},
		Header{HeaderErrTimestamp, []byte(strconv.FormatInt(ts.UnixMilli(), 10))},
		Header{HeaderVersion, []byte(version)},
	)
}

// DeadLetter is one stored dead letter, with the reason headers (Kafka
// Connect's __connect.errors.*) parsed out. Partition and Offset say where
// it sits in its store (a dead-letter topic's partition and offset; for a
// file, partition 0 and the line).
type DeadLetter struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	// Headers are all of the record's headers, reason headers included.
	Headers []Header
	// OrigTopic, OrigPartition and OrigOffset say where the message came
	// from; OrigPartition and OrigOffset are -1 when the headers lack them.
	OrigTopic     string
	OrigPartition int32
	OrigOffset    int64
	ErrorClass    string
	ErrorMessage  string
}

// NewDeadLetter reads a stored dead letter m (its position in the store,
// bytes and headers) into a DeadLetter, parsing the reason headers.
func NewDeadLetter(m Record) DeadLetter {
	d := DeadLetter{Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value,
		OrigPartition: -1, OrigOffset: -1}
	for _, h := range m.Headers {
		d.Headers = append(d.Headers, Header{Key: h.Key, Value: h.Value})
		v := string(h.Value)
		switch h.Key {
		case HeaderErrTopic:
			d.OrigTopic = v
		case HeaderErrPartition:
			if p, err := strconv.ParseInt(v, 10, 32); err == nil {
				d.OrigPartition = int32(p)
			}
		case HeaderErrOffset:
			if o, err := strconv.ParseInt(v, 10, 64); err == nil {
				d.OrigOffset = o
			}
		case HeaderErrClass:
			d.ErrorClass = v
		case HeaderErrMessage:
			d.ErrorMessage = v
		}
	}
	return d
}

// IsReasonHeader reports the headers ragsync (or Kafka Connect) added when
// dead-lettering; replay strips them so the message is what was consumed.
func IsReasonHeader(k string) bool {
	return strings.HasPrefix(k, "__connect.errors.") || k == HeaderVersion
}

// DeadLetterStore is where one transport keeps its dead letters for the
// operator: a Kafka dead-letter topic, the file source's dead-letter file,
// the Postgres source's. `ragsync dlq` picks the store from the
// configuration and drives it; each transport implements it in its room.
type DeadLetterStore interface {
	// List returns up to n dead letters (n <= 0: all), oldest first (for
	// a topic, by partition then offset). A store that does not exist yet
	// may hold none, or be an error, as the transport decides.
	List(ctx context.Context, n int) ([]DeadLetter, error)
	// Replay hands every dead letter not replayed before back to the
	// transport once, as it was consumed (the reason headers removed),
	// and returns how many it replayed.
	Replay(ctx context.Context) (int, error)
	// Purge deletes every dead letter and returns how many it deleted.
	// What is purged cannot be replayed.
	Purge(ctx context.Context) (int64, error)
}
