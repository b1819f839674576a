package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaConfig configures the Kafka consumer-group source.
type KafkaConfig struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Topics are the Debezium topics to consume, e.g. dbserver1.public.articles.
	Topics []string
	// Group is the consumer group. Defaults to "ragsync".
	Group string
	// MaxPollRecords is the most records handed over in one batch. Defaults to 500.
	MaxPollRecords int
	// MaxPollBytes is the most key+value bytes handed over in one batch; a
	// single larger record still forms a batch of its own so the source
	// always progresses. Defaults to 16 MiB.
	MaxPollBytes int
	// FetchMaxBytes bounds one fetch response (kgo.FetchMaxBytes), i.e. what
	// the client buffers ahead of the pipeline; fetches are limited to one in
	// flight or buffered at a time (kgo.MaxConcurrentFetches(1)). Defaults to
	// 16 MiB.
	FetchMaxBytes int
	// ClientID names this client to the brokers. Defaults to "ragsync".
	ClientID string
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating (a SIGKILLed or OOM-killed pod) before giving its
	// partitions to others; until then they are not consumed. Defaults to
	// 10s (Kafka's client default before 3.0; 45s since, which stalls a
	// partition for most of a minute after every crash).
	SessionTimeout time.Duration
	// Logger receives the Kafka client's warnings. Nil discards.
	Logger *slog.Logger
	// StopAtEnd makes Fetch return io.EOF once the group has consumed every
	// partition up to the end offsets seen at start (serve --once: drain the
	// backlog and exit). Meant for a single member.
	StopAtEnd bool
	// Opts are extra franz-go options, for tests and advanced tuning.
	Opts []kgo.Opt
}

// KafkaSource consumes Debezium topics in a consumer group. Offsets are
// committed only by a batch's Ack, after the pipeline applied every record of
// the batch, and rebalances are held while a batch is in flight
// (BlockRebalanceOnPoll), so a partition never moves to another member with
// applied-but-uncommitted or committed-but-unapplied records.
type KafkaSource struct {
	cl       *kgo.Client
	topics   []string
	assigned *assignment
	maxPoll  int
	maxBytes int
	inFlight bool
	// pending are records polled but not yet handed out (a poll larger
	// than MaxPollBytes is handed out in several batches); the rebalance
	// stays blocked until they are all acknowledged.
	pending []*kgo.Record
	// unacked are the records of the batch handed out and not yet
	// acknowledged.
	unacked []*kgo.Record
	// targets and positions drive StopAtEnd: end offsets at start, and the
	// next offset to consume per partition.
	targets   map[string]map[int32]int64
	positions map[string]map[int32]int64
}

// NewKafkaSource connects the consumer.
func NewKafkaSource(cfg KafkaConfig) (*KafkaSource, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("source.kafka.brokers: list at least one broker, e.g. [localhost:9092]")
	}
	if len(cfg.Topics) == 0 {
		return nil, errors.New("source.kafka.topics: list the Debezium topics to consume, e.g. [dbserver1.public.articles]")
	}
	if cfg.Group == "" {
		cfg.Group = "ragsync"
	}
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 500
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "ragsync"
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.MaxPollBytes <= 0 {
		cfg.MaxPollBytes = 16 << 20
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 16 << 20
	}
	// Memory bound: the client holds at most one fetch response
	// (FetchMaxBytes; a partition whose first batch is larger still returns
	// that batch) plus the records of the batch in flight, which the
	// pipeline holds until Ack; nothing more is fetched while a batch is in
	// flight beyond that one buffered response, because polling stops.
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.FetchMaxBytes(int32(min(cfg.FetchMaxBytes, 1<<30))),
		kgo.MaxConcurrentFetches(1),
		// The dead-letter producer shares this client and must be able to
		// set aside a message as large as any it consumed (the broker's
		// message.max.bytes still applies to the dead-letter topic).
		kgo.ProducerBatchMaxBytes(32 << 20),
	}
	if cfg.Logger != nil {
		opts = append(opts, kgo.WithLogger(kgoLogger{cfg.Logger}))
	}
	asg := &assignment{parts: map[string]map[int32]bool{}}
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { asg.set(m, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { asg.set(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { asg.set(m, false) }),
	)
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	s := &KafkaSource{cl: cl, topics: cfg.Topics, assigned: asg, maxPoll: cfg.MaxPollRecords, maxBytes: cfg.MaxPollBytes}
	if cfg.StopAtEnd {
		if err := s.loadTargets(cfg); err != nil {
			cl.Close()
			return nil, err
		}
	}
	return s, nil
}

// loadTargets records the end offsets to stop at and the group's committed
// offsets to start from.
func (s *KafkaSource) loadTargets(cfg KafkaConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(s.cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topics...)
	if err != nil {
		return fmt.Errorf("list end offsets of %v: %w (is source.kafka.brokers right?)", cfg.Topics, err)
	}
	s.targets = map[string]map[int32]int64{}
	s.positions = map[string]map[int32]int64{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		setOffset(s.targets, o.Topic, o.Partition, o.Offset)
		setOffset(s.positions, o.Topic, o.Partition, 0)
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	committed, err := adm.FetchOffsets(ctx, cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // a new group starts at the beginning
	}
	if err != nil {
		return fmt.Errorf("fetch committed offsets of group %s: %w", cfg.Group, err)
	}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			if _, ok := s.targets[o.Topic]; ok {
				setOffset(s.positions, o.Topic, o.Partition, o.At)
			}
		}
	})
	return nil
}

func setOffset(m map[string]map[int32]int64, topic string, p int32, off int64) {
	if m[topic] == nil {
		m[topic] = map[int32]int64{}
	}
	m[topic][p] = off
}

// atEnd reports whether every partition was consumed up to its target.
func (s *KafkaSource) atEnd() bool {
	for t, parts := range s.targets {
		for p, end := range parts {
			if s.positions[t][p] < end {
				return false
			}
		}
	}
	return true
}

// Fetch hands over the next batch: at most MaxPollRecords records and
// MaxPollBytes bytes. The batch's Ack commits, per partition, the offset after
// the batch's last record; batches are handed out and acknowledged strictly
// one after another, so the committed offset is always the end of a prefix of
// the partition in which every record was applied (or dead-lettered), never
// past an unapplied record. While a batch (or the rest of its poll) is
// outstanding the group cannot rebalance (BlockRebalanceOnPoll): a revoke
// waits for the Ack, so nothing in flight is committed by the next owner.
func (s *KafkaSource) Fetch(ctx context.Context) (Batch, error) {
	if s.inFlight {
		// The previous batch was never acknowledged (its processing failed
		// and the caller carries on). Rewind every partition to its first
		// unacknowledged record, so the next batch redelivers it instead of
		// a later Ack committing past it, then let the group move on.
		s.rewind()
	}
	if len(s.pending) == 0 {
		if err := s.poll(ctx); err != nil {
			return Batch{}, err
		}
		if len(s.pending) == 0 {
			// Nothing arrived (a short StopAtEnd round, or only fetch errors):
			// an empty batch lets the group rebalance in between.
			s.cl.AllowRebalance()
			return Batch{Ack: func(context.Context) error { return nil }}, nil
		}
	}
	recs := s.cut()
	msgs := make([]Message, len(recs))
	for i, r := range recs {
		msgs[i] = messageOf(r)
	}
	s.inFlight, s.unacked = true, recs
	ack := func(ctx context.Context) error {
		if err := s.cl.CommitRecords(ctx, recs...); err != nil {
			return fmt.Errorf("commit offsets: %w", err)
		}
		if s.positions != nil {
			for _, r := range recs {
				if r.Offset+1 > s.positions[r.Topic][r.Partition] {
					setOffset(s.positions, r.Topic, r.Partition, r.Offset+1)
				}
			}
		}
		s.inFlight, s.unacked = false, nil
		if len(s.pending) == 0 {
			s.cl.AllowRebalance()
		}
		return nil
	}
	return Batch{Messages: msgs, Ack: ack}, nil
}

// poll fills pending with the next records; io.EOF means done (StopAtEnd
// reached, or the client closed).
func (s *KafkaSource) poll(ctx context.Context) error {
	pollCtx := ctx
	if s.targets != nil {
		if s.atEnd() {
			return io.EOF
		}
		// Poll in short rounds so the end check runs even when nothing arrives.
		var cancel context.CancelFunc
		pollCtx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	fetches := s.cl.PollRecords(pollCtx, s.maxPoll)
	if fetches.IsClientClosed() {
		return io.EOF
	}
	if err := ctx.Err(); err != nil {
		s.cl.AllowRebalance()
		return err
	}
	var errs []error
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", topic, p, err))
		}
	})
	s.pending = fetches.Records()
	if len(errs) > 0 && len(s.pending) == 0 {
		// Fetch errors are retried inside the client; pause so a broken
		// broker is no hot loop.
		s.cl.AllowRebalance()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// cut takes the next batch off pending: up to maxBytes of keys and values,
// at least one record.
func (s *KafkaSource) cut() []*kgo.Record {
	n, size := 0, 0
	for n < len(s.pending) {
		sz := len(s.pending[n].Key) + len(s.pending[n].Value)
		if n > 0 && size+sz > s.maxBytes {
			break
		}
		size += sz
		n++
	}
	recs := s.pending[:n:n]
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.pending = nil
	}
	return recs
}

// rewind moves consumption back to the first record not acknowledged, per
// partition, and drops what was polled but not handed out.
func (s *KafkaSource) rewind() {
	to := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range append(s.unacked, s.pending...) {
		if to[r.Topic] == nil {
			to[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		if cur, ok := to[r.Topic][r.Partition]; !ok || r.Offset < cur.Offset {
			to[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		}
	}
	if len(to) > 0 {
		s.cl.SetOffsets(to)
	}
	s.inFlight, s.unacked, s.pending = false, nil, nil
	s.cl.AllowRebalance()
}

// Close leaves the group and closes the client. Uncommitted records are
// redelivered to whoever takes the partitions.
func (s *KafkaSource) Close() {
	// A blocked rebalance would also block leaving the group.
	s.cl.AllowRebalance()
	s.cl.Close()
}

// Client exposes the underlying client, for the dead-letter producer and lag metrics.
func (s *KafkaSource) Client() *kgo.Client { return s.cl }

func messageOf(r *kgo.Record) Message {
	m := Message{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Key:       r.Key,
		Value:     r.Value,
		Timestamp: r.Timestamp,
	}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, Header{Key: h.Key, Value: h.Value})
	}
	return m
}

// kgoLogger bridges franz-go's logger to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		k.l.Warn(msg, keyvals...)
	default:
		k.l.Debug(msg, keyvals...)
	}
}
