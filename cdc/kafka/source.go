package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
)

// Config configures the Kafka consumer-group source.
type Config struct {
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
	// RevokeTimeout bounds how long a rebalance that takes partitions away
	// waits for the batches of those partitions already handed out to be
	// applied and committed. Past it the partitions go anyway; the next
	// owner replays what this member applied without committing, which
	// version fencing makes a no-op. Keep it under the group's rebalance
	// timeout (60s). Defaults to 30s.
	RevokeTimeout time.Duration
	// Decoder decodes each record's Debezium value as it is handed over
	// (Record.Change, or Record.Err with the reason): the pipeline decodes
	// nothing. Nil is a decoder with the default settings. With a schema
	// registry (cdc.DecoderConfig.Schemas), a record whose schema the
	// registry cannot give now holds the source back (it hands over nothing
	// meanwhile) until it can.
	Decoder *cdc.Decoder
	// Logger receives the Kafka client's warnings and the schema
	// registry's stalls. Nil discards.
	Logger *slog.Logger
	// StopAtEnd makes Fetch return io.EOF once the group has consumed every
	// partition up to the end offsets seen at start (serve --once: drain the
	// backlog and exit). Meant for a single member.
	StopAtEnd bool
	// Opts are extra franz-go options, for tests and advanced tuning.
	Opts []kgo.Opt
}

// Source consumes Debezium topics in a consumer group. It hands out
// one partition's records per batch (Batch.Lane names the partition), keeps
// handing out batches while earlier ones are applied, and commits a
// partition's offset only in a batch's Ack, which the pipeline calls once
// every record of the partition up to it was applied: the committed offset
// is always the end of a prefix of the partition in which every record was
// applied (or dead-lettered), never past an unapplied record.
//
// A rebalance that takes partitions away waits, in the revoke callback, for
// the batches of those partitions already handed out to be acknowledged
// (up to RevokeTimeout), so the next owner starts where this member's
// applied prefix ends; records of a revoked partition not yet handed out
// are dropped, and an Ack that comes after its partition was revoked
// commits nothing (the next owner replays from the committed offset, and
// version fencing makes the replay a no-op).
type Source struct {
	cl       *kgo.Client
	topics   []string
	assigned *assignment
	maxPoll  int
	maxBytes int
	revokeTO time.Duration
	decoder  *cdc.Decoder
	logger   *slog.Logger

	// registryStalled is set while the source waits for the schema
	// registry; registryRetries counts the failed attempts.
	registryStalled atomic.Bool
	registryRetries atomic.Int64

	mu   sync.Mutex
	cond *sync.Cond
	// pending are records polled but not yet handed out, per partition
	// in poll order; order lists the partitions with pending records.
	pending map[tp][]*kgo.Record
	order   []tp
	// out counts, per partition, the batches handed out and not yet
	// acknowledged; epoch is bumped when a partition is revoked, so an
	// Ack of an earlier epoch commits nothing.
	out     map[tp]int
	epoch   map[tp]int
	closing bool
	// targets and consumed drive StopAtEnd: end offsets at start, and the
	// next offset to hand out per partition.
	targets  map[string]map[int32]int64
	consumed map[string]map[int32]int64

	// group names the watermark's source; marks are the partitions'.
	group string
	marks partMarks
}

// tp names a partition.
type tp struct {
	topic string
	part  int32
}

func (t tp) String() string { return t.topic + "/" + strconv.Itoa(int(t.part)) }

// NewSource connects the consumer.
func NewSource(cfg Config) (*Source, error) {
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
	if cfg.RevokeTimeout <= 0 {
		cfg.RevokeTimeout = 30 * time.Second
	}
	// Memory bound: the client holds at most one fetch response
	// (FetchMaxBytes; a partition whose first batch is larger still returns
	// that batch) plus the records polled and not yet handed out; the
	// pipeline bounds what it holds (pipeline.max_in_flight_bytes) by not
	// fetching while at its bound.
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
	if cfg.Decoder == nil {
		cfg.Decoder = cdc.NewDecoder(cdc.DecoderConfig{})
	}
	asg := &assignment{parts: map[string]map[int32]bool{}}
	s := &Source{topics: cfg.Topics, assigned: asg, maxPoll: cfg.MaxPollRecords, maxBytes: cfg.MaxPollBytes,
		revokeTO: cfg.RevokeTimeout, decoder: cfg.Decoder, logger: cfg.Logger, pending: map[tp][]*kgo.Record{}, out: map[tp]int{}, epoch: map[tp]int{},
		group: cfg.Group, marks: partMarks{parts: map[tp]*partMark{}}}
	s.cond = sync.NewCond(&s.mu)
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { asg.set(m, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.revoke(m, true)
			asg.set(m, false)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			// Lost (the session expired): another member may own them
			// already and a commit would fail; wait for nothing.
			s.revoke(m, false)
			asg.set(m, false)
		}),
	)
	opts = append(opts, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	s.cl = cl
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
func (s *Source) loadTargets(cfg Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(s.cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topics...)
	if err != nil {
		return fmt.Errorf("list end offsets of %v: %w (is source.kafka.brokers right?)", cfg.Topics, err)
	}
	s.targets = map[string]map[int32]int64{}
	s.consumed = map[string]map[int32]int64{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		setOffset(s.targets, o.Topic, o.Partition, o.Offset)
		setOffset(s.consumed, o.Topic, o.Partition, 0)
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
				setOffset(s.consumed, o.Topic, o.Partition, o.At)
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

// atEnd reports whether every partition was handed out up to its target.
// Called with mu held.
func (s *Source) atEnd() bool {
	for t, parts := range s.targets {
		for p, end := range parts {
			if s.consumed[t][p] < end {
				return false
			}
		}
	}
	return true
}

// Fetch hands over the next batch: records of one partition, at most
// MaxPollRecords records and MaxPollBytes bytes, with Lane naming the
// partition. It may be called again before earlier batches are
// acknowledged; their Acks must be called in fetch order within a lane.
// A batch's Ack commits the partition's offset after its last record.
func (s *Source) Fetch(ctx context.Context) (cdc.Batch, error) {
	if b, ok, err := s.handOut(ctx); ok || err != nil {
		return b, err
	}
	if err := s.poll(ctx); err != nil {
		return cdc.Batch{}, err
	}
	if b, ok, err := s.handOut(ctx); ok || err != nil {
		return b, err
	}
	// Nothing arrived (a short StopAtEnd round, or only fetch errors).
	return cdc.Batch{}, nil
}

// cut is a batch taken off the pending records and not yet decoded: the
// partition's epoch when it was cut tells whether a revoke took the
// partition while its records waited for the schema registry.
type cut struct {
	p     tp
	epoch int
	recs  []*kgo.Record
}

// handOut decodes and returns the next batch, if any. Decoding happens
// outside the lock: a registry-framed record may wait for its schema.
func (s *Source) handOut(ctx context.Context) (cdc.Batch, bool, error) {
	for {
		c, ok := s.next()
		if !ok {
			return cdc.Batch{}, false, nil
		}
		b, ok, err := s.decode(ctx, c)
		if err != nil || ok {
			return b, ok, err
		}
		// The partition was revoked while its records waited for the
		// registry: its next owner reads them; cut another batch.
	}
}

// next cuts the next batch off the pending records, taking partitions in
// turn so that one busy partition does not starve the others.
func (s *Source) next() (cut, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.order) > 0 {
		p := s.order[0]
		s.order = s.order[1:]
		recs := s.pending[p]
		if len(recs) == 0 {
			delete(s.pending, p)
			continue
		}
		n, size := 0, 0
		for n < len(recs) && n < s.maxPoll {
			sz := len(recs[n].Key) + len(recs[n].Value)
			if n > 0 && size+sz > s.maxBytes {
				break
			}
			size += sz
			n++
		}
		batch := recs[:n:n]
		if n < len(recs) {
			s.pending[p] = recs[n:]
			s.order = append(s.order, p)
		} else {
			delete(s.pending, p)
		}
		if s.consumed != nil {
			setOffset(s.consumed, p.topic, p.part, batch[len(batch)-1].Offset+1)
		}
		s.out[p]++
		return cut{p: p, epoch: s.epoch[p], recs: batch}, true
	}
	return cut{}, false
}

// decode decodes the records of c into a batch. A record whose schema the
// registry cannot give now (unreachable, a server error, refused
// credentials) is retried with backoff, never dead-lettered: the source
// stalls (Fetch hands over nothing meanwhile, so this member's other
// partitions wait too), visibly (a warning,
// ragsync_kafka_schema_registry_stalled), and goes on when the registry
// answers. A rebalance meanwhile waits up to RevokeTimeout for the batch,
// then takes the partition; the waiting batch is dropped. It returns false when the partition
// was revoked or the source closed meanwhile, and the context's error
// (with the records put back) when ctx ends first.
func (s *Source) decode(ctx context.Context, c cut) (cdc.Batch, bool, error) {
	msgs := make([]cdc.Record, len(c.recs))
	for i, r := range c.recs {
		m := messageOf(r)
		for attempt := 0; ; attempt++ {
			rec, err := cdc.DecodeContext(ctx, s.decoder, m)
			if err == nil {
				msgs[i] = rec
				break
			}
			if ok, err := s.waitRegistry(ctx, c, r, err, attempt); !ok || err != nil {
				return cdc.Batch{}, false, err
			}
		}
	}
	if s.registryStalled.Swap(false) && s.logger != nil {
		s.logger.Info("schema registry answers again: the source goes on", "partition", c.p.String())
	}
	var ts uint64
	for _, m := range msgs {
		if m.Change != nil {
			ts = max(ts, m.Change.Version.TS)
		}
	}
	return cdc.Batch{Records: msgs, Lane: c.p.String(), Ack: s.ackFunc(c.p, c.epoch, c.recs[len(c.recs)-1], ts)}, true, nil
}

// waitRegistry backs off after the registry failed to give r's schema
// (250 ms doubling to 10 s). It reports whether to retry: false, with c
// given back, when the partition was revoked, the source is closing or
// ctx ended (then with ctx's error).
func (s *Source) waitRegistry(ctx context.Context, c cut, r *kgo.Record, cause error, attempt int) (bool, error) {
	s.registryRetries.Add(1)
	if !s.registryStalled.Swap(true) || attempt%20 == 19 {
		if s.logger != nil {
			s.logger.Warn("schema registry unavailable: the source waits and retries (records are never dead-lettered for this); check source.kafka.registry",
				"partition", c.p.String(), "offset", r.Offset, "err", cause)
		}
	}
	wait := min(250*time.Millisecond<<min(attempt, 6), 10*time.Second)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		s.giveBack(c)
		return false, ctx.Err()
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.epoch[c.p] != c.epoch {
		s.release(c)
		return false, nil
	}
	return true, nil
}

// giveBack returns the records of c, not handed out, to the front of the
// pending records, unless the partition was revoked meanwhile.
func (s *Source) giveBack(c cut) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch[c.p] != c.epoch {
		return
	}
	if len(s.pending[c.p]) == 0 {
		s.order = append([]tp{c.p}, s.order...)
	}
	s.pending[c.p] = append(slices.Clip(c.recs), s.pending[c.p]...)
	if s.consumed != nil {
		setOffset(s.consumed, c.p.topic, c.p.part, c.recs[0].Offset)
	}
	s.release(c)
}

// release counts c as no longer handed out. Called with mu held.
func (s *Source) release(c cut) {
	if s.epoch[c.p] != c.epoch {
		return
	}
	s.out[c.p]--
	if s.out[c.p] <= 0 {
		delete(s.out, c.p)
	}
	s.cond.Broadcast()
}

// ackFunc commits the offset after last, unless the partition was revoked
// since the batch was handed out. It keeps only what the commit needs of
// the last record, not the batch's values.
func (s *Source) ackFunc(p tp, epoch int, last *kgo.Record, commitTS uint64) func(context.Context) error {
	mark := &kgo.Record{Topic: last.Topic, Partition: last.Partition, Offset: last.Offset, LeaderEpoch: last.LeaderEpoch}
	return func(ctx context.Context) error {
		s.mu.Lock()
		current := s.epoch[p] == epoch
		s.mu.Unlock()
		if current {
			if err := s.cl.CommitRecords(ctx, mark); err != nil {
				return fmt.Errorf("commit offset %d of %s: %w", mark.Offset+1, p, err)
			}
		}
		s.mu.Lock()
		if s.epoch[p] == epoch {
			s.out[p]--
			if s.out[p] == 0 {
				delete(s.out, p)
			}
			s.cond.Broadcast()
			if current {
				s.marks.applied(p, mark.Offset, commitTS)
			}
		}
		s.mu.Unlock()
		return nil
	}
}

// revoke drops what was polled and not handed out of partitions m and,
// when wait is set, waits until the batches of m already handed out are
// acknowledged (their offsets committed), at most RevokeTimeout: the next
// owner then starts right after this member's applied prefix. Acks that
// come later commit nothing. Runs in the group's callback, while the
// pipeline keeps applying and acknowledging.
func (s *Source) revoke(m map[string][]int32, wait bool) {
	var parts []tp
	for t, ps := range m {
		for _, p := range ps {
			parts = append(parts, tp{t, p})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		delete(s.pending, p)
	}
	if wait {
		deadline := time.Now().Add(s.revokeTO)
		timer := time.AfterFunc(s.revokeTO, func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
		defer timer.Stop()
		for !s.closing && time.Now().Before(deadline) && s.outstanding(parts) {
			s.cond.Wait()
		}
	}
	for _, p := range parts {
		s.epoch[p]++
		delete(s.out, p)
	}
	s.marks.drop(parts)
}

// outstanding reports whether a batch of parts is handed out and not yet
// acknowledged. Called with mu held.
func (s *Source) outstanding(parts []tp) bool {
	for _, p := range parts {
		if s.out[p] > 0 {
			return true
		}
	}
	return false
}

// poll adds the next records to pending; io.EOF means done (StopAtEnd
// reached, or the client closed).
func (s *Source) poll(ctx context.Context) error {
	pollCtx := ctx
	if s.targets != nil {
		s.mu.Lock()
		end := s.atEnd()
		s.mu.Unlock()
		if end {
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
	// Records go to pending before the group may rebalance
	// (BlockRebalanceOnPoll holds it until AllowRebalance), so a revoke
	// always sees and drops those of its partitions.
	s.mu.Lock()
	fetches.EachRecord(func(r *kgo.Record) {
		p := tp{r.Topic, r.Partition}
		if len(s.pending[p]) == 0 {
			s.order = append(s.order, p)
		}
		s.pending[p] = append(s.pending[p], r)
	})
	s.mu.Unlock()
	s.cl.AllowRebalance()
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", topic, p, err))
		}
	})
	if len(errs) > 0 && fetches.NumRecords() == 0 {
		// Fetch errors are retried inside the client; pause so a broken
		// broker is no hot loop.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// Close leaves the group and closes the client. Uncommitted records are
// redelivered to whoever takes the partitions.
func (s *Source) Close() {
	// Leaving the group revokes everything: nothing will acknowledge the
	// batches still out, so the revoke must not wait for them.
	s.mu.Lock()
	s.closing = true
	s.cond.Broadcast()
	s.mu.Unlock()
	// A blocked rebalance would also block leaving the group.
	s.cl.AllowRebalance()
	s.cl.Close()
}

// Client exposes the underlying client, for the dead-letter producer and lag metrics.
func (s *Source) Client() *kgo.Client { return s.cl }

func messageOf(r *kgo.Record) cdc.Record {
	m := cdc.Record{Raw: cdc.Raw{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, cdc.Header{Key: h.Key, Value: h.Value})
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
