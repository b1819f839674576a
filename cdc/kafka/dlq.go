package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
)

// DLQReplayGroup is the consumer group whose committed offsets on a
// dead-letter topic mark how far DeadLetterTopic.Replay got, so a second
// replay does not re-inject what the first one did.
const DLQReplayGroup = "ragsync-dlq-replay"

// deadLetterOf reads a record of a dead-letter topic.
func deadLetterOf(r *kgo.Record) cdc.DeadLetter { return cdc.NewDeadLetter(messageOf(r)) }

// Dial connects a plain client to brokers (no consumer group or consume
// options), the kind a DeadLetterTopic needs. Close it when done.
func Dial(brokers []string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(brokers...))
}

// DeadLetterTopic is a dead-letter topic as a cdc.DeadLetterStore.
type DeadLetterTopic struct {
	cl       *kgo.Client
	topic    string
	replayTo string
}

var _ cdc.DeadLetterStore = (*DeadLetterTopic)(nil)

// NewDeadLetterTopic works on the dead-letter topic topic through cl, which
// must be a plain client (no consumer group or consume options, see Dial):
// readers are built from its options. Replay re-produces to replayTo, or,
// when it is empty, to each record's original topic (its
// __connect.errors.topic header).
func NewDeadLetterTopic(cl *kgo.Client, topic, replayTo string) *DeadLetterTopic {
	return &DeadLetterTopic{cl: cl, topic: topic, replayTo: replayTo}
}

// List returns up to n dead letters of the topic from its start (n <= 0:
// all), ordered by partition then offset. A topic that does not exist is
// an error.
func (d *DeadLetterTopic) List(ctx context.Context, n int) ([]cdc.DeadLetter, error) {
	cl, topic := d.cl, d.topic
	adm := kadm.NewClient(cl)
	starts, ends, err := dlqBounds(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	var out []cdc.DeadLetter
	err = readRange(ctx, cl, topic, starts, ends, func(rs []*kgo.Record) (bool, error) {
		for _, r := range rs {
			out = append(out, deadLetterOf(r))
		}
		return n > 0 && len(out) >= n, nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// Replay re-produces every dead letter of the topic not replayed before to
// the replay topic (empty: each record's original topic, from its
// __connect.errors.topic header) with its original key, value and headers,
// the reason headers removed. After each produced batch it commits the
// DLQReplayGroup offsets on the dead-letter topic, so a replay that is
// interrupted or run twice never re-injects a record twice (at-least-once
// for a batch cut by a crash; the version-fenced apply makes that
// harmless). It returns how many records were replayed.
func (d *DeadLetterTopic) Replay(ctx context.Context) (int, error) {
	cl, dlqTopic, toTopic := d.cl, d.topic, d.replayTo
	adm := kadm.NewClient(cl)
	starts, ends, err := dlqBounds(ctx, adm, dlqTopic)
	if err != nil {
		return 0, err
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, DLQReplayGroup, dlqTopic)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, fmt.Errorf("fetch replay offsets of %s: %w", dlqTopic, err)
	}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.Topic == dlqTopic && o.At > starts[o.Partition] {
			starts[o.Partition] = o.At
		}
	})
	replayed := 0
	err = readRange(ctx, cl, dlqTopic, starts, ends, func(rs []*kgo.Record) (bool, error) {
		out := make([]*kgo.Record, 0, len(rs))
		commit := kadm.Offsets{}
		for _, r := range rs {
			to := toTopic
			if to == "" {
				to = deadLetterOf(r).OrigTopic
			}
			if to == "" {
				return false, fmt.Errorf("replay %s/%d@%d: no %s header; pass the topic to replay to", dlqTopic, r.Partition, r.Offset, cdc.HeaderErrTopic)
			}
			nr := &kgo.Record{Topic: to, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				if !cdc.IsReasonHeader(h.Key) {
					nr.Headers = append(nr.Headers, h)
				}
			}
			out = append(out, nr)
			commit.AddOffset(dlqTopic, r.Partition, r.Offset+1, -1)
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return false, fmt.Errorf("produce replayed records: %w", err)
		}
		// Commit only after the broker has the copies: a crash in between
		// replays this batch again rather than losing it.
		if err := adm.CommitAllOffsets(ctx, DLQReplayGroup, commit); err != nil {
			return false, fmt.Errorf("commit replay offsets of %s: %w", dlqTopic, err)
		}
		replayed += len(out)
		return false, nil
	})
	return replayed, err
}

// Purge deletes every record of the topic up to its current end (Kafka
// DeleteRecords) and returns how many it deleted. The topic itself stays.
func (d *DeadLetterTopic) Purge(ctx context.Context) (int64, error) {
	topic := d.topic
	adm := kadm.NewClient(d.cl)
	starts, ends, err := dlqBounds(ctx, adm, topic)
	if err != nil {
		return 0, err
	}
	del := kadm.Offsets{}
	var n int64
	for p, end := range ends {
		if end > starts[p] {
			del.AddOffset(topic, p, end, -1)
			n += end - starts[p]
		}
	}
	if n == 0 {
		return 0, nil
	}
	resps, err := adm.DeleteRecords(ctx, del)
	if err != nil {
		return 0, fmt.Errorf("delete records of %s: %w", topic, err)
	}
	var errs []error
	for _, ps := range resps {
		for p, r := range ps {
			if r.Err != nil {
				errs = append(errs, fmt.Errorf("delete records of %s/%d: %w", topic, p, r.Err))
			}
		}
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	return n, nil
}

// dlqBounds returns the start and end offset of every partition of topic.
func dlqBounds(ctx context.Context, adm *kadm.Client, topic string) (starts, ends map[int32]int64, err error) {
	so, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = so.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	eo, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = eo.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	so.Each(func(o kadm.ListedOffset) { starts[o.Partition] = o.Offset })
	eo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	if len(ends) == 0 {
		return nil, nil, fmt.Errorf("dead-letter topic %s: %w", topic, kerr.UnknownTopicOrPartition)
	}
	return starts, ends, nil
}

// readRange reads topic's partitions from starts up to (excluding) ends with
// a sibling direct-consume client, calling fn per poll; fn returns true to
// stop early.
func readRange(ctx context.Context, cl *kgo.Client, topic string, starts, ends map[int32]int64, fn func([]*kgo.Record) (bool, error)) error {
	parts := map[int32]kgo.Offset{}
	remaining := map[int32]int64{} // partition → end offset still to reach
	for p, end := range ends {
		if end > starts[p] {
			parts[p] = kgo.NewOffset().At(starts[p])
			remaining[p] = end
		}
	}
	if len(parts) == 0 {
		return nil
	}
	opts := append(append([]kgo.Opt(nil), cl.Opts()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	rd, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("create reader for %s: %w", topic, err)
	}
	defer rd.Close()
	for len(remaining) > 0 {
		fs := rd.PollRecords(ctx, 1000)
		if err := ctx.Err(); err != nil {
			return err
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Errorf("fetch %s/%d: %w", t, p, err)) })
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		var batch []*kgo.Record
		for _, r := range fs.Records() {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				continue // records produced after we looked at the end
			}
			batch = append(batch, r)
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		}
		if len(batch) > 0 {
			stop, err := fn(batch)
			if err != nil || stop {
				return err
			}
		}
	}
	return nil
}
