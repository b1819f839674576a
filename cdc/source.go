package cdc

import (
	"context"
	"errors"
)

// Batch is a run of messages from a source together with its acknowledgement.
//
// Ack commits the source position past every message of the batch (Kafka
// offsets, a replication LSN, a file position, a backfill checkpoint). The
// pipeline keeps fetching while earlier batches are applied, so Fetch may be
// called again before earlier batches are acknowledged; it calls Ack only
// after every message of the batch, and of every batch fetched before it in
// the same Lane, was applied, skipped or dead-lettered (the contiguous
// prefix), and calls the Acks of one lane in fetch order. A crash before
// Ack replays the batch, and version fencing makes the replay a no-op.
//
// Lane names an independently acknowledged sequence: a Kafka partition
// ("topic/partition"), so that a slow document in one partition does not
// hold back the commits of the others. Empty is the single lane of a source
// whose positions are one sequence (a replication slot, a file). Ack may be
// nil when the batch has nothing to acknowledge.
type Batch struct {
	Records []Record
	Ack     func(ctx context.Context) error
	Lane    string
}

// Decode decodes m's Debezium value with d, as the file and Redis Streams
// sources do before handing records over: the change goes in m.Change, or
// the reason it could not be built in m.Err (Value, Key and Headers stay,
// so a dead letter keeps the original bytes). It suits a decoder without a
// schema registry: with one, a record whose schema cannot be had now would
// be marked for the dead letters, so the Kafka source hands over with
// DecodeContext, which returns that failure instead.
func Decode(d *Decoder, m Record) Record {
	if m.Change != nil {
		return m
	}
	ch, err := d.Decode(m)
	if err != nil {
		m.Err = err
		return m
	}
	m.Change = &ch
	return m
}

// DecodeContext is Decode with a context for the schema registry's
// requests. A registry that cannot be reached is returned as an error
// (errors.Is ErrRegistryUnavailable) and m is returned undecoded: the
// source retries it later and never dead-letters it for that.
func DecodeContext(ctx context.Context, d *Decoder, m Record) (Record, error) {
	if m.Change != nil {
		return m, nil
	}
	ch, err := d.DecodeContext(ctx, m)
	switch {
	case errors.Is(err, ErrRegistryUnavailable):
		return m, err
	case err != nil:
		m.Err = err
		return m, nil
	}
	m.Change = &ch
	return m, nil
}

// DecodeAll is Decode of every record of ms, in place: what an in-memory
// source of Debezium JSON (a test's, a benchmark's) hands over.
func DecodeAll(d *Decoder, ms []Record) []Record {
	for i := range ms {
		ms[i] = Decode(d, ms[i])
	}
	return ms
}
