package redisstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
)

// DeadLetterStream is a dead-letter stream (what DeadLetters writes) as a
// cdc.DeadLetterStore.
type DeadLetterStream struct {
	rdb                *redis.Client
	stream, replayTo   string
	nullKey, nullValue string
}

var _ cdc.DeadLetterStore = (*DeadLetterStream)(nil)

// NewDeadLetterStream works on the dead-letter stream stream through rdb.
// Replay adds its dead letters to replayTo, or, when it is empty, to each
// one's original stream (its __connect.errors.topic field), writing a null
// key or value as nullKey and nullValue (Debezium Server's
// null.key/null.value; empty: DefaultNull).
func NewDeadLetterStream(rdb *redis.Client, stream, replayTo, nullKey, nullValue string) *DeadLetterStream {
	if nullKey == "" {
		nullKey = DefaultNull
	}
	if nullValue == "" {
		nullValue = DefaultNull
	}
	return &DeadLetterStream{rdb: rdb, stream: stream, replayTo: replayTo, nullKey: nullKey, nullValue: nullValue}
}

// List returns up to n dead letters of the stream (n <= 0: all), oldest
// first. A DeadLetter's Offset is its entry's Offset in the dead-letter
// stream, its Timestamp when it was dead-lettered. A stream that does not
// exist holds none: dead-letter streams are created by their first entry.
func (d *DeadLetterStream) List(ctx context.Context, n int) ([]cdc.DeadLetter, error) {
	var out []cdc.DeadLetter
	err := d.each(ctx, func(m redis.XMessage) (bool, error) {
		out = append(out, cdc.NewDeadLetter(d.record(m)))
		return n <= 0 || len(out) < n, nil
	})
	return out, err
}

// replayBatch is how many dead letters one replay transaction moves.
const replayBatch = 100

// replayScript adds one dead letter back to its stream and deletes it
// from the dead-letter stream, in one step: an XADD that fails (the
// stream's key holds another type, Redis is out of memory) stops the
// script before the XDEL, so a dead letter is never deleted without its
// copy. (A MULTI/EXEC would run the XDEL after a failed XADD: Redis does
// not roll a transaction back.)
//
// KEYS: the stream to replay to, the dead-letter stream.
// ARGV: the dead letter's id, then the fields and values to add.
var replayScript = `
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[2], ARGV[1])
return 1
`

// Replay adds every dead letter of the stream back to the stream it came
// from (or the replay stream) without the reason fields, as Debezium Server
// writes: the extended shape (key, value, headers) when it has headers,
// else the compact one (one field, key → value). Each is added and deleted
// from the dead-letter stream in one step, so a replay that is interrupted
// or run twice never adds one twice. It returns how many it replayed.
func (d *DeadLetterStream) Replay(ctx context.Context) (int, error) {
	replayed := 0
	for {
		msgs, err := d.rdb.XRangeN(ctx, d.stream, "-", "+", replayBatch).Result()
		if err != nil {
			return replayed, fmt.Errorf("read dead-letter stream %s: %w", d.stream, err)
		}
		if len(msgs) == 0 {
			return replayed, nil
		}
		pipe := d.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(msgs))
		for i, m := range msgs {
			dl := cdc.NewDeadLetter(d.record(m))
			to := d.replayTo
			if to == "" {
				to = dl.OrigTopic
			}
			if to == "" {
				return replayed, fmt.Errorf("replay %s@%s: no %s field; pass the stream to replay to", d.stream, m.ID, cdc.HeaderErrTopic)
			}
			cmds[i] = pipe.Eval(ctx, replayScript, []string{to, d.stream}, append([]any{m.ID}, d.original(dl)...)...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var errs []error
		for i, c := range cmds {
			if err := c.Err(); err != nil {
				errs = append(errs, fmt.Errorf("replay %s@%s: %w", d.stream, msgs[i].ID, err))
				continue
			}
			replayed++
		}
		if len(errs) > 0 {
			// What failed stays in the dead-letter stream for the next try.
			return replayed, errors.Join(errs...)
		}
	}
}

// original is the entry a dead letter came from, as Debezium Server wrote
// it: its key, value and headers, without ragsync's reason fields.
func (d *DeadLetterStream) original(dl cdc.DeadLetter) []any {
	key, value := d.nullKey, d.nullValue
	if dl.Key != nil {
		key = string(dl.Key)
	}
	if dl.Value != nil {
		value = string(dl.Value)
	}
	var headers []any
	for _, h := range dl.Headers {
		if !cdc.IsReasonHeader(h.Key) && h.Key != fieldEntryID {
			headers = append(headers, h.Key, string(h.Value))
		}
	}
	if len(headers) == 0 {
		return []any{key, value}
	}
	return append([]any{fieldKey, key, fieldValue, value}, headers...)
}

// Purge deletes every dead letter (XTRIM MAXLEN 0; the stream stays) and
// returns how many it deleted.
func (d *DeadLetterStream) Purge(ctx context.Context) (int64, error) {
	n, err := d.rdb.XTrimMaxLen(ctx, d.stream, 0).Result()
	if err != nil {
		return 0, fmt.Errorf("purge dead-letter stream %s: %w", d.stream, err)
	}
	return n, nil
}

// each calls fn with the stream's entries, oldest first, until fn returns
// false.
func (d *DeadLetterStream) each(ctx context.Context, fn func(redis.XMessage) (bool, error)) error {
	from := "-"
	for {
		msgs, err := d.rdb.XRangeN(ctx, d.stream, from, "+", replayBatch).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read dead-letter stream %s: %w", d.stream, err)
		}
		for _, m := range msgs {
			more, err := fn(m)
			if err != nil || !more {
				return err
			}
		}
		if len(msgs) < replayBatch {
			return nil
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}

// record reads a dead-letter entry: "key" and "value" are the original
// bytes, every other field a header.
func (d *DeadLetterStream) record(m redis.XMessage) cdc.Record {
	off, _ := Offset(m.ID)
	r := cdc.Record{Raw: cdc.Raw{Topic: d.stream, Offset: off, Timestamp: timeOf(off)}}
	for _, k := range slices.Sorted(maps.Keys(m.Values)) {
		v := []byte(str(m.Values[k]))
		switch k {
		case fieldKey:
			r.Key = v
		case fieldValue:
			r.Value = v
		default:
			r.Headers = append(r.Headers, cdc.Header{Key: k, Value: v})
		}
	}
	return r
}
