package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
)

// DLQSuffix is appended to a stream's name to form its dead-letter stream.
const DLQSuffix = ".ragsync-dlq"

// fieldEntryID is the field of a dead letter that holds the id of the entry
// it came from, as Redis wrote it (its __connect.errors.offset header holds
// the same as an Offset).
const fieldEntryID = "ragsync.entry_id"

// DeadLetters writes dead letters to "<stream>.ragsync-dlq", one entry per
// dead letter: the fields "key" and "value" with the bytes Debezium Server
// wrote (absent for a null key or value), then the record's headers and
// Kafka Connect's reason headers (cdc.DeadLetterHeaders: the source
// stream, its entry's offset, the error class and message, ragsync's
// version), each a field of its own, and the source entry's id. The
// dead-letter stream is created by its first entry and never trimmed: a
// dead letter waits for an operator (ragsync dlq).
type DeadLetters struct {
	rdb     *redis.Client
	version string
}

// NewDeadLetters writes with rdb (the Source's client); version is
// ragsync's, recorded in each dead letter.
func NewDeadLetters(rdb *redis.Client, version string) *DeadLetters {
	return &DeadLetters{rdb: rdb, version: version}
}

// Put writes one dead letter and waits for Redis to have it.
func (d *DeadLetters) Put(ctx context.Context, m cdc.Record, cause error) error {
	stream := m.Topic + DLQSuffix
	// Bounded, so a Redis that will not take the entry (out of memory,
	// gone) surfaces as a retried error in the logs instead of a hang.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var values []any
	if m.Key != nil {
		values = append(values, fieldKey, m.Key)
	}
	if m.Value != nil {
		values = append(values, fieldValue, m.Value)
	}
	for _, h := range cdc.DeadLetterHeaders(m, cause, d.version) {
		values = append(values, h.Key, h.Value)
	}
	values = append(values, fieldEntryID, EntryID(m.Offset))
	if err := d.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err(); err != nil {
		return fmt.Errorf("write dead letter to stream %s: %w", stream, err)
	}
	return nil
}
