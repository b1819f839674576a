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
	// ClientID names this client to the brokers. Defaults to "ragsync".
	ClientID string
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
	maxPoll  int
	inFlight bool
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
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	}
	if cfg.Logger != nil {
		opts = append(opts, kgo.WithLogger(kgoLogger{cfg.Logger}))
	}
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	s := &KafkaSource{cl: cl, maxPoll: cfg.MaxPollRecords}
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

// Fetch polls the next records. The batch's Ack commits their offsets and
// lets a pending rebalance proceed.
func (s *KafkaSource) Fetch(ctx context.Context) (Batch, error) {
	if s.inFlight {
		// The previous batch was never acknowledged (its processing failed);
		// let the group move on, the records will be redelivered.
		s.cl.AllowRebalance()
		s.inFlight = false
	}
	pollCtx := ctx
	if s.targets != nil {
		if s.atEnd() {
			return Batch{}, io.EOF
		}
		// Poll in short rounds so the end check runs even when nothing arrives.
		var cancel context.CancelFunc
		pollCtx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	fetches := s.cl.PollRecords(pollCtx, s.maxPoll)
	if fetches.IsClientClosed() {
		return Batch{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		s.cl.AllowRebalance()
		return Batch{}, err
	}
	var errs []error
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", topic, p, err))
		}
	})
	recs := fetches.Records()
	msgs := make([]Message, len(recs))
	for i, r := range recs {
		msgs[i] = messageOf(r)
	}
	s.inFlight = true
	ack := func(ctx context.Context) error {
		if len(recs) > 0 {
			if err := s.cl.CommitRecords(ctx, recs...); err != nil {
				return fmt.Errorf("commit offsets: %w", err)
			}
		}
		if s.positions != nil {
			for _, r := range recs {
				if r.Offset+1 > s.positions[r.Topic][r.Partition] {
					setOffset(s.positions, r.Topic, r.Partition, r.Offset+1)
				}
			}
		}
		s.inFlight = false
		s.cl.AllowRebalance()
		return nil
	}
	if len(errs) > 0 && len(recs) == 0 {
		// Fetch errors are retried inside the client; surface them only when
		// nothing else arrived, after a pause so a broken broker is no hot loop.
		_ = ack(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return Batch{Ack: func(context.Context) error { return nil }}, nil
	}
	return Batch{Messages: msgs, Ack: ack}, nil
}

// Close leaves the group and closes the client. Uncommitted records are
// redelivered to whoever takes the partitions.
func (s *KafkaSource) Close() { s.cl.Close() }

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
