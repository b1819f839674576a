package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
)

// Source reads Debezium Server's streams in a consumer group. It hands out
// one stream's entries per batch (Batch.Lane names the stream), keeps
// handing out batches while earlier ones are applied, and acknowledges
// (XACK) exactly the entries of a batch in its Ack, which the pipeline
// calls once they were applied, skipped or dead-lettered. An entry is
// therefore pending in the group from its delivery until it was applied:
// a crash leaves it pending, never lost.
//
// Pending entries come back two ways. When the source starts (and after a
// read whose reply may have been lost) it re-reads the entries pending on
// its own consumer name (XREADGROUP from id 0) before new ones; and it
// takes over the entries pending on any consumer for longer than ClaimIdle
// (XAUTOCLAIM), at start and every ClaimIdle/2, which is how a dead
// member's entries are applied when its name is not reused. Both are
// replays of changes that may have been applied already; version fencing
// makes those no-ops.
//
// One member per group keeps each stream's changes in order; more members
// share a stream's entries and then rely on version fencing alone to keep
// older changes from overwriting newer ones.
//
// Fetch must not be called concurrently with itself; Ack, Lag and Close
// may be called from other goroutines.
type Source struct {
	cfg Config
	rdb *redis.Client
	log *slog.Logger

	// The fields below belong to Fetch.
	streams   []*stream
	turn      int       // round-robin position in streams
	nextClaim time.Time // when the next XAUTOCLAIM pass starts
	nextCheck time.Time // when missing streams are looked for again
	backoff   time.Duration

	mu sync.Mutex
	// held are, per stream, the ids read and not yet acknowledged (queued
	// or handed out): a re-read of the consumer's pending entries, or a
	// claim of entries that are slow rather than abandoned, skips them
	// instead of handing them out twice.
	held    map[string]map[string]bool
	closing bool
	// lagKnown: the server reports a group's lag (Redis 7 or later).
	lagKnown bool
}

// stream is what Fetch knows of one configured stream.
type stream struct {
	name string
	// ready: the stream exists and has the group.
	ready bool
	// missingLogged: the warning that it does not exist yet was logged.
	missingLogged bool
	// recovering: its own pending entries are being re-read, from
	// recoverFrom (exclusive).
	recovering  bool
	recoverFrom string
	// claimFrom is the cursor of an XAUTOCLAIM pass in progress; "" when
	// none is.
	claimFrom string
	// queue holds entries read and not yet handed out, in read order.
	queue []redis.XMessage
	// StopAtEnd: target is the offset of the last entry the stream held at
	// start (hasTarget false for an empty or missing stream); done once
	// every entry up to it was handed out.
	target    int64
	hasTarget bool
	done      bool
}

// NewSource connects to Redis, checks the streams and creates the consumer
// group on each stream that exists (never the stream: an absent one is
// waited for, with a warning). Close it when done.
func NewSource(ctx context.Context, cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		// Not %w: the parse error may quote the URL, password included.
		return nil, errors.New("source.redis_streams.url: not a Redis URL (want redis://[user:password@]host:port/db, or rediss:// for TLS)")
	}
	// Fetch's blocking read holds one connection, Ack and the lag scrape
	// take others; a small pool leaves the server's clients to others.
	opts.PoolSize = 4
	// CLIENT LIST names each connection after its consumer.
	opts.ClientName = "ragsync:" + strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, cfg.Consumer)
	rdb := redis.NewClient(opts)
	s := &Source{cfg: cfg, rdb: rdb, log: cfg.Logger, held: map[string]map[string]bool{}}
	for _, name := range cfg.Streams {
		s.streams = append(s.streams, &stream{name: name})
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w (is source.redis_streams.url right? is Redis running?)", opts.Addr, err)
	}
	if err := s.checkVersion(ctx); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	if cfg.StopAtEnd {
		if err := s.loadTargets(ctx); err != nil {
			_ = rdb.Close()
			return nil, err
		}
	}
	if err := s.prepare(ctx, true); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return s, nil
}

// Client is the Redis client the source reads with, which the dead-letter
// streams share. The source closes it.
func (s *Source) Client() *redis.Client { return s.rdb }

// checkVersion refuses a server without XAUTOCLAIM (Redis 6.2), which
// takes over a dead consumer's entries, and notes whether it reports a
// group's lag (Redis 7).
func (s *Source) checkVersion(ctx context.Context) error {
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("read the Redis server's version (INFO server): %w", err)
	}
	var major, minor int
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			_, _ = fmt.Sscanf(v, "%d.%d", &major, &minor)
		}
	}
	if major == 0 {
		return nil // not said (a proxy, a compatible server): try
	}
	if major < 6 || major == 6 && minor < 2 {
		return fmt.Errorf("source.redis_streams.url: Redis %d.%d is too old; the source needs Redis 6.2 or later (XAUTOCLAIM)", major, minor)
	}
	s.lagKnown = major >= 7
	return nil
}

// loadTargets records, for StopAtEnd, the last entry of each stream: what
// was there at start.
func (s *Source) loadTargets(ctx context.Context) error {
	for _, st := range s.streams {
		last, err := s.rdb.XRevRangeN(ctx, st.name, "+", "-", 1).Result()
		if err != nil {
			return fmt.Errorf("read the last entry of stream %s: %w", st.name, err)
		}
		if len(last) == 1 {
			st.target, _ = Offset(last[0].ID)
			st.hasTarget = true
		}
	}
	return nil
}

// prepare creates the group on each stream that is not ready yet and now
// exists; a stream that does not exist is waited for (with one warning),
// and, for StopAtEnd, has nothing to read. A key of another type is an
// error: the configuration names the wrong key. Streams that became ready
// re-read their own pending entries and start a claim pass.
func (s *Source) prepare(ctx context.Context, first bool) error {
	now := time.Now()
	if !first && now.Before(s.nextCheck) {
		return nil
	}
	s.nextCheck = now.Add(max(s.cfg.Block, time.Second))
	for _, st := range s.streams {
		if st.ready || st.done {
			continue
		}
		typ, err := s.rdb.Type(ctx, st.name).Result()
		if err != nil {
			return fmt.Errorf("look up stream %s: %w", st.name, err)
		}
		switch typ {
		case "stream":
		case "none":
			if s.cfg.StopAtEnd {
				st.done = true
				continue
			}
			if !st.missingLogged {
				st.missingLogged = true
				s.log.WarnContext(ctx, "stream does not exist yet; waiting for Debezium Server to write its first change (check source.redis_streams.streams if it should exist)", "stream", st.name)
			}
			continue
		default:
			return configError{fmt.Errorf("source.redis_streams.streams: %s is a Redis %s, not a stream; name the streams Debezium Server writes", st.name, typ)}
		}
		from := "0"
		if s.cfg.Start == StartLatest {
			from = "$"
		}
		// No MKSTREAM: the stream is Debezium Server's, and a group on a
		// stream that exists reads from where the setting says.
		if err := s.rdb.XGroupCreate(ctx, st.name, s.cfg.Group, from).Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("create consumer group %s on stream %s: %w", s.cfg.Group, st.name, err)
		}
		if st.missingLogged {
			s.log.InfoContext(ctx, "stream exists now; reading it", "stream", st.name)
		}
		s.forgetConsumers(ctx, st.name)
		// Start with the consumer's own pending entries and a claim pass;
		// the next pass is due ClaimIdle/2 after this one.
		st.ready, st.recovering, st.recoverFrom, st.claimFrom = true, true, "0", "0-0"
		s.nextClaim = now.Add(s.cfg.ClaimIdle / 2)
	}
	return nil
}

// forgetScript deletes the group's consumers, other than ARGV[2], that
// have no pending entry and were idle for at least ARGV[3] ms, and returns
// their names. The check and the deletion are one step, so a consumer is
// never deleted with entries pending (XGROUP DELCONSUMER drops them from
// the group): one that reads again is created anew by its read.
//
// KEYS: the stream. ARGV: the group, this consumer, the idle time in ms.
var forgetScript = redis.NewScript(`
local gone = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local m = {}
  for i = 1, #c, 2 do m[c[i]] = c[i + 1] end
  if m['name'] ~= ARGV[2] and m['pending'] == 0 and m['idle'] >= tonumber(ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], m['name'])
    gone[#gone + 1] = m['name']
  end
end
return gone
`)

// forgetConsumers deletes the consumers of stream's group that left
// nothing pending and were idle for ClaimIdle: each start under a
// host-and-pid name adds one, and XINFO CONSUMERS would list every
// restart's forever. Housekeeping only: a failure is logged at debug.
func (s *Source) forgetConsumers(ctx context.Context, stream string) {
	gone, err := forgetScript.Run(ctx, s.rdb, []string{stream}, s.cfg.Group, s.cfg.Consumer, s.cfg.ClaimIdle.Milliseconds()).StringSlice()
	if err != nil {
		s.log.DebugContext(ctx, "forget idle consumers failed", "stream", stream, "error", err)
		return
	}
	if len(gone) > 0 {
		s.log.InfoContext(ctx, "forgot consumers that left nothing pending", "stream", stream, "consumers", gone)
	}
}

// Fetch hands over the next batch: entries of one stream, at most
// MaxPollRecords, with Lane naming the stream. It may be called again
// before earlier batches are acknowledged. It returns an empty batch when
// nothing arrived within Block, and io.EOF once closed or, with
// StopAtEnd, once everything the streams held at start was handed out.
// Redis errors are logged and retried, never returned: the pipeline
// would stop on them, and Redis coming back is the common case.
func (s *Source) Fetch(ctx context.Context) (cdc.Batch, error) {
	if b, ok := s.next(ctx); ok {
		return b, nil
	}
	if s.atEnd() {
		return cdc.Batch{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return cdc.Batch{}, err
	}
	if err := s.poll(ctx); err != nil {
		return cdc.Batch{}, err
	}
	if b, ok := s.next(ctx); ok {
		return b, nil
	}
	if s.atEnd() {
		return cdc.Batch{}, io.EOF
	}
	return cdc.Batch{}, nil
}

// atEnd reports whether StopAtEnd's work is done: every stream's pending
// entries re-read, one claim pass made, and its entries up to the target
// handed out.
func (s *Source) atEnd() bool {
	if !s.cfg.StopAtEnd {
		return false
	}
	for _, st := range s.streams {
		if !st.done || len(st.queue) > 0 {
			return false
		}
	}
	return true
}

// poll reads the next entries into the streams' queues: first the
// consumer's own pending entries, then a claim pass when one is due, then
// new entries. Only a closed source or a configuration error is returned.
func (s *Source) poll(ctx context.Context) error {
	err := s.pollOnce(ctx)
	if err == nil {
		s.backoff = 0
		return nil
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing || errors.Is(err, redis.ErrClosed) {
		return io.EOF
	}
	var cfgErr configError
	if errors.As(err, &cfgErr) {
		return cfgErr.error
	}
	if ctx.Err() != nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		// The group or the stream was deleted under us: look for the
		// stream again, and create the group when it is there.
		for _, st := range s.streams {
			st.ready = false
		}
		s.nextCheck = time.Time{}
	}
	// A read whose reply was lost may have delivered entries to this
	// consumer: read its pending entries again before new ones.
	for _, st := range s.streams {
		if st.ready {
			st.recovering, st.recoverFrom = true, "0"
		}
	}
	s.backoff = min(max(2*s.backoff, 100*time.Millisecond), 5*time.Second)
	s.log.WarnContext(ctx, "read from Redis failed; retrying (check source.redis_streams.url: is Redis up?)", "error", err, "backoff", s.backoff)
	sleep(ctx, s.backoff)
	return nil
}

// configError is an error no retry can fix: the configuration names a key
// that is not a stream.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

func (s *Source) pollOnce(ctx context.Context) error {
	if err := s.prepare(ctx, false); err != nil {
		return err
	}
	// The consumer's own pending entries first: what it read before a
	// crash (or a lost reply) and never acknowledged.
	for _, st := range s.streams {
		if !st.ready || !st.recovering {
			continue
		}
		res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.cfg.Group, Consumer: s.cfg.Consumer,
			Streams: []string{st.name, st.recoverFrom}, Count: int64(s.cfg.MaxPollRecords), Block: -1}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		var msgs []redis.XMessage
		for _, r := range res {
			msgs = append(msgs, r.Messages...)
		}
		if len(msgs) == 0 {
			st.recovering = false
			continue
		}
		st.recoverFrom = msgs[len(msgs)-1].ID
		s.enqueue(st, msgs)
		return nil
	}
	// Entries other consumers (dead, or this one before it was renamed)
	// left pending for longer than ClaimIdle.
	if s.claimDue() {
		for _, st := range s.streams {
			if !st.ready || st.claimFrom == "" {
				continue
			}
			msgs, cursor, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: st.name, Group: s.cfg.Group, Consumer: s.cfg.Consumer,
				MinIdle: s.cfg.ClaimIdle, Start: st.claimFrom, Count: int64(s.cfg.MaxPollRecords)}).Result()
			if err != nil {
				return err
			}
			st.claimFrom = cursor
			if cursor == "0-0" {
				st.claimFrom = ""
			}
			if s.enqueue(st, msgs) > 0 {
				return nil
			}
		}
		if s.claimDue() {
			return nil // the pass goes on at the next poll
		}
	}
	return s.readNew(ctx)
}

// claimDue reports whether a claim pass is in progress, or starts one when
// it is time.
func (s *Source) claimDue() bool {
	for _, st := range s.streams {
		if st.ready && st.claimFrom != "" {
			return true
		}
	}
	now := time.Now()
	if now.Before(s.nextClaim) {
		return false
	}
	// A pass every ClaimIdle/2: an abandoned entry waits at most 1.5 ×
	// ClaimIdle.
	s.nextClaim = now.Add(s.cfg.ClaimIdle / 2)
	started := false
	for _, st := range s.streams {
		if st.ready && !st.done {
			st.claimFrom, started = "0-0", true
		}
	}
	return started
}

// readNew reads entries never delivered to the group, from every ready
// stream at once, waiting up to Block (StopAtEnd does not wait: a stream
// with nothing new is done).
func (s *Source) readNew(ctx context.Context) error {
	var names []string
	var from []*stream
	for _, st := range s.streams {
		if st.ready && !st.done {
			names = append(names, st.name)
			from = append(from, st)
		}
	}
	if len(names) == 0 {
		if !s.cfg.StopAtEnd {
			sleep(ctx, s.cfg.Block) // every stream is missing: look again later
		}
		return nil
	}
	block := s.cfg.Block
	if s.cfg.StopAtEnd {
		block = -1 // no BLOCK
	}
	ids := make([]string, len(names))
	for i := range ids {
		ids[i] = ">"
	}
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.cfg.Group, Consumer: s.cfg.Consumer,
		Streams: append(names, ids...), Count: int64(s.cfg.MaxPollRecords), Block: block}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	got := map[string][]redis.XMessage{}
	for _, r := range res {
		got[r.Stream] = append(got[r.Stream], r.Messages...)
	}
	for _, st := range from {
		msgs := got[st.name]
		s.enqueue(st, msgs)
		if !s.cfg.StopAtEnd {
			continue
		}
		if len(msgs) == 0 || !st.hasTarget {
			st.done = true // nothing more was there at start
		} else if off, _ := Offset(msgs[len(msgs)-1].ID); off >= st.target {
			st.done = true
		}
	}
	return nil
}

// enqueue queues msgs for handing out, except those already held (queued,
// or handed out and not yet acknowledged), and returns how many it queued.
func (s *Source) enqueue(st *stream, msgs []redis.XMessage) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.held[st.name]
	if held == nil {
		held = map[string]bool{}
		s.held[st.name] = held
	}
	n := 0
	for _, m := range msgs {
		if held[m.ID] {
			continue
		}
		held[m.ID] = true
		st.queue = append(st.queue, m)
		n++
	}
	return n
}

// next cuts the next batch off the queued entries, taking streams in turn
// so that one busy stream does not starve the others.
func (s *Source) next(ctx context.Context) (cdc.Batch, bool) {
	for range s.streams {
		st := s.streams[s.turn%len(s.streams)]
		s.turn++
		if len(st.queue) == 0 {
			continue
		}
		n := min(len(st.queue), s.cfg.MaxPollRecords)
		msgs := st.queue[:n:n]
		st.queue = st.queue[n:]
		recs := make([]cdc.Record, len(msgs))
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
			recs[i] = s.record(ctx, st.name, m)
		}
		return cdc.Batch{Records: recs, Lane: st.name, Ack: s.ackFunc(st.name, ids)}, true
	}
	return cdc.Batch{}, false
}

// record is the cdc.Record of entry m: decoded, or the reason it cannot be.
func (s *Source) record(ctx context.Context, name string, m redis.XMessage) cdc.Record {
	if m.Values == nil {
		// A pending entry whose data is gone: someone deleted it (XDEL) or
		// trimmed the stream (MAXLEN) before it was applied. Its change is
		// lost to this source; acknowledging it is all that is left.
		off, _ := Offset(m.ID)
		s.log.WarnContext(ctx, "a stream entry was deleted before it was applied; its change is lost: run ragsync backfill for its table, and do not trim the stream below the group's pending entries",
			"stream", name, "id", m.ID)
		return cdc.Record{Raw: cdc.Raw{Topic: name, Offset: off}, Err: fmt.Errorf("entry %s of %s was deleted before it was applied: %w", m.ID, name, cdc.ErrSkip)}
	}
	raw, err := s.raw(name, m)
	if err != nil {
		return cdc.Record{Raw: raw, Err: err}
	}
	return cdc.Decode(s.cfg.Decoder, cdc.Record{Raw: raw})
}

// ackFunc acknowledges exactly ids, the entries of one batch of stream
// name. The entries of a batch are acknowledged only here, so an entry is
// pending until the pipeline applied it.
func (s *Source) ackFunc(name string, ids []string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := s.rdb.XAck(ctx, name, s.cfg.Group, ids...).Err(); err != nil {
			return fmt.Errorf("acknowledge %d entries of stream %s (XACK): %w", len(ids), name, err)
		}
		s.mu.Lock()
		for _, id := range ids {
			delete(s.held[name], id)
		}
		s.mu.Unlock()
		return nil
	}
}

// Close closes the Redis client; a Fetch blocked in a read returns io.EOF.
// Entries handed out and not acknowledged stay pending in the group: this
// consumer re-reads them when it starts again under the same name, and
// another takes them over after ClaimIdle.
func (s *Source) Close() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.mu.Unlock()
	_ = s.rdb.Close()
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
