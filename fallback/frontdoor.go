package fallback

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
)

// Embedder turns query texts into vectors (embedder.Hashing, embedder.OpenAI).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Searcher runs the vector and the full-text search (sink.Store).
type Searcher interface {
	Search(ctx context.Context, vec []float32, q sinkQuery) ([]sinkHit, error)
	SearchText(ctx context.Context, text string, q sinkQuery) ([]sinkHit, error)
}

// FrontDoor answers retrieval requests from the Redis request stream. Build it
// with NewFrontDoor and call Run; several processes may run front doors on
// the same prefix and group. Safe for concurrent use.
type FrontDoor struct {
	cfg Config
	rdb *redis.Client
	// target is the physical index answered, with its embedder and
	// searcher: one pointer, read once per batch of requests, so no
	// request embeds with one index's model and searches another.
	target  atomic.Pointer[target]
	keys    keys
	bloom   *Bloom
	breaker *breaker
	metrics *metrics
	logger  *slog.Logger
	sf      singleflight.Group

	// marks is the latest reading of the index's watermark, for requests
	// with after; afterSlots bounds the requests waiting for it and
	// afterWG holds them, so Run returns only after them. stopping is
	// closed when Run's context ends, which ends the waits.
	marks      *watcher
	afterSlots chan struct{}
	// inFlight bounds the requests past the cache (max_in_flight); the
	// workers and the requests done waiting for the watermark share it.
	inFlight chan struct{}
	afterWG  sync.WaitGroup
	stopping atomic.Pointer[chan struct{}]

	// afterSearch, when set by a test, runs after a successful search and
	// before the reply; returning true simulates the worker dying there.
	afterSearch func(r request) (die bool)
}

// NewFrontDoor validates cfg (after WithDefaults) and returns a front door.
// emb and search may be nil for a FrontDoor used only for DLQ operations
// (DLQList, DLQReplay, DLQPurge); Run then returns ErrNotRunnable. reg nil
// keeps metrics private; logger nil discards logs. rdb stays owned by the
// caller.
func NewFrontDoor(cfg Config, rdb *redis.Client, emb Embedder, search Searcher, reg prometheus.Registerer, logger *slog.Logger) (*FrontDoor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("frontdoor: a Redis client is required")
	}
	if emb != nil && search != nil {
		if need, have := minPoolSize(cfg), rdb.Options().PoolSize; have < need {
			return nil, fmt.Errorf("frontdoor: the Redis client's pool has %d connections, the front door needs at least %d: "+
				"each of the %d workers and the dead-letter reader holds one in a blocking XREADGROUP, and the cache, "+
				"lock and reply commands need the rest (raise redis.Options.PoolSize, or pool_size in frontdoor.redis_url, or lower frontdoor.workers)",
				have, need, cfg.Workers)
		}
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: register metrics: %w", err)
	}
	f := &FrontDoor{
		cfg:     cfg,
		rdb:     rdb,
		keys:    keys{prefix: cfg.Prefix, index: cfg.Index},
		bloom:   NewBloom(rdb, cfg.Prefix, cfg.Index, cfg.Bloom),
		metrics: m,
		logger:  logger.With("stage", "frontdoor"),
		marks:   newWatcher(),
	}
	f.marks.logger = f.logger
	f.afterSlots = make(chan struct{}, cfg.MaxAfterWaiters)
	f.inFlight = make(chan struct{}, cfg.MaxInFlight)
	f.target.Store(&target{index: cfg.Index, emb: emb, search: search})
	f.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, func(s breakerState) {
		m.breakerState.Set(float64(s))
	})
	return f, nil
}

// target is what a request is answered from; see FrontDoor.SetTarget.
type target struct {
	index  string
	emb    Embedder
	search Searcher
}

// SetTarget switches the front door to physical index (an alias's new
// target after `ragsync index promote` or `rollback`), answered with emb
// and search built for it. Requests already read keep the target they
// started with. Result and query-embedding cache keys include the physical
// index, so no cached answer crosses indexes even between replicas that
// switch at different moments; the caller also bumps the generation
// (BumpGeneration) so every replica drops its fresh answers. The Bloom
// filters and the document map stay keyed by Config.Index (the alias):
// every index of a family holds the same documents (serve dual-writes
// them), so they are right for either. Safe for concurrent use.
func (f *FrontDoor) SetTarget(index string, emb Embedder, search Searcher) {
	f.target.Store(&target{index: index, emb: emb, search: search})
}

// Target is the physical index the front door answers from.
func (f *FrontDoor) Target() string { return f.target.Load().index }

// Bloom returns the front door's Bloom filters, for the sink (Add) and the
// rebuild command (Rebuild).
func (f *FrontDoor) Bloom() *Bloom { return f.bloom }

// minPoolSize is the least Redis pool a running front door works with: one
// connection per blocking reader (the workers and the dead-letter reader)
// plus room for the commands of requests in flight and the reclaimer. With
// fewer, the blocking reads hold every connection and the rest wait for one.
func minPoolSize(cfg Config) int { return cfg.Workers + 1 + 8 }

// defaultPoolSize is the pool OpenRedis gives a URL without pool_size:
// go-redis's own default, 10 × GOMAXPROCS, is 10 connections in a one-CPU
// container, fewer than a front door's blocking readers and their work need.
func defaultPoolSize() int { return max(10*runtime.GOMAXPROCS(0), 64) }

// OpenRedis parses url, connects and pings, with an error that names the
// fix. url may carry an ACL user and password (redis://user:pass@host:6379/0)
// and use TLS (rediss://host:6380/0, verified against the system roots with
// the host as server name). Without pool_size in url the pool has
// max(10 × GOMAXPROCS, 64) connections. The caller closes the client.
func OpenRedis(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redisOptions(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w (%s)", opts.Addr, err, redisHint(err, opts))
	}
	return rdb, nil
}

// redisHint names the likely fix for a failed first PING.
func redisHint(err error, opts *redis.Options) string {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	switch {
	case errors.As(err, &unknownCA):
		return "the server's certificate is signed by a CA this machine does not trust: add the CA to the system store or point SSL_CERT_FILE at it"
	case errors.As(err, &badHost):
		return "the server's certificate does not name the host in frontdoor.redis_url: connect by a name the certificate holds"
	case opts.TLSConfig == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return "the server closed the connection: if it speaks TLS only, use a rediss:// URL"
	}
	return "is Redis running? try `make services`; with ACLs, check the user and password in frontdoor.redis_url"
}

func redisOptions(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		// Not %w: the parse error may quote the URL, password included.
		return nil, fmt.Errorf("frontdoor.redis_url: not a Redis URL (want redis://[user:password@]host:port/db, or rediss:// for TLS)")
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = defaultPoolSize()
	}
	return opts, nil
}

// BumpGeneration starts a new cache generation for index: every fresh cache
// entry is abandoned at once (stale answers are kept). Call it after a
// reindex or a purge; ordinary document edits do not need it, their
// staleness is bounded by cache_ttl.
func BumpGeneration(ctx context.Context, rdb *redis.Client, prefix, index string) (int64, error) {
	n, err := rdb.Incr(ctx, keys{prefix: prefix, index: index}.generation()).Result()
	if err != nil {
		return 0, fmt.Errorf("bump cache generation of %s: %w", index, err)
	}
	return n, nil
}

func defaultConsumer() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomID()[:8])
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	// RFC 4122 version 4 layout, so ids look like the UUIDs the protocol asks for.
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Run starts the request workers, the reclaimer (XAUTOCLAIM, dead-lettering,
// trimming, gauges) and the DLQ worker, and blocks until ctx ends. Requests in
// flight when ctx ends are finished (bounded by search_timeout and
// lock_wait); requests taken but not answered stay pending and are reclaimed
// by another front door. It returns nil on cancellation.
func (f *FrontDoor) Run(ctx context.Context) error {
	if t := f.target.Load(); t.emb == nil || t.search == nil {
		return ErrNotRunnable
	}
	if err := f.ensureGroups(ctx); err != nil {
		return err
	}
	// The hit path runs serveScript by hash inside a pipeline, where
	// go-redis cannot fall back from NOSCRIPT to EVAL by itself.
	if err := serveScript.Load(ctx, f.rdb).Err(); err != nil {
		return fmt.Errorf("load Lua scripts into Redis: %w", err)
	}
	f.logger.InfoContext(ctx, "front door started", "workers", f.cfg.Workers, "group", f.cfg.Group, "consumer", f.cfg.Consumer, "prefix", f.cfg.Prefix)
	g, gctx := errgroup.WithContext(ctx)
	// Requests waiting for the watermark stop when the workers do (gctx
	// ends with g.Wait at the latest), and end before Run returns.
	stop := make(chan struct{})
	f.stopping.Store(&stop)
	context.AfterFunc(gctx, func() { close(stop) })
	defer f.afterWG.Wait()
	if f.marks.source() != nil {
		g.Go(func() error {
			f.marks.run(gctx)
			return nil
		})
	}
	inFlight := f.inFlight // shared by the workers
	for i := range f.cfg.Workers {
		consumer := fmt.Sprintf("%s-%d", f.cfg.Consumer, i)
		g.Go(func() error {
			return f.readLoop(gctx, f.keys.requests(), consumer, inFlight, func(ctx context.Context, pipe redis.Pipeliner, msgs []redis.XMessage) func() []func(context.Context) {
				return f.queueServe(ctx, pipe, msgs, 1, false)
			})
		})
	}
	g.Go(func() error {
		return f.readLoop(gctx, f.keys.dlq(), f.cfg.Consumer+"-dlq", make(chan struct{}, f.cfg.BatchSize), eachEntry(f.handleDeadLetter))
	})
	g.Go(func() error { return f.maintain(gctx) })
	err := g.Wait()
	f.logger.InfoContext(ctx, "front door stopped")
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (f *FrontDoor) ensureGroups(ctx context.Context) error {
	for _, stream := range []string{f.keys.requests(), f.keys.dlq()} {
		// "0" rather than "$": requests queued before the first front door
		// started must be answered too.
		err := f.rdb.XGroupCreateMkStream(ctx, stream, f.cfg.Group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("create consumer group %s on %s: %w", f.cfg.Group, stream, err)
		}
	}
	return nil
}

// handler processes one delivered entry; deliveries counts this delivery.
type handler func(ctx context.Context, msg redis.XMessage, deliveries int64)

// batchHandler takes one XREADGROUP batch (first deliveries), queues what it
// needs from Redis on pipe and returns a func that, once pipe has been sent,
// returns the work left, one independent func per entry.
type batchHandler func(ctx context.Context, pipe redis.Pipeliner, msgs []redis.XMessage) func() []func(context.Context)

// eachEntry leaves all the work of a batch to the per-entry handler h.
func eachEntry(h handler) batchHandler {
	return func(_ context.Context, _ redis.Pipeliner, msgs []redis.XMessage) func() []func(context.Context) {
		work := make([]func(context.Context), len(msgs))
		for i, msg := range msgs {
			work[i] = func(ctx context.Context) { h(ctx, msg, 1) }
		}
		return func() []func(context.Context) { return work }
	}
}

// readLoop reads new entries of stream for consumer until ctx ends, handing
// each batch to h and running the work h leaves concurrently, at most
// cap(slots) funcs at a time (slots may be shared by several loops). Redis
// errors are logged and retried with a capped backoff: a front door outlives
// a Redis restart.
//
// Under load a batch costs one round trip: the pipeline that carries h's
// commands for batch n also carries the read of batch n+1, without BLOCK.
// Only when that read comes back empty does the loop block in a read of its
// own. Round trips, not commands, are most of what a cache hit costs Redis
// and this process (a write and a read syscall on each side), so this saves
// one per batch when requests keep coming.
func (f *FrontDoor) readLoop(ctx context.Context, stream, consumer string, slots chan struct{}, h batchHandler) error {
	// The loop reads on while earlier work (misses: embed + pgvector) is
	// in flight, so one slow search does not hold up the cache hits behind
	// it. The slots bound that work; when they are all taken the loop stops
	// reading (after at most the one batch read ahead) and the entries wait
	// in the stream for other workers.
	var wg sync.WaitGroup
	defer wg.Wait()
	// The loop's reads and pipelines go over a connection of its own: a
	// blocking reader holds one anyway, and taking one from the pool costs
	// go-redis a health-check syscall per round trip. A connection that
	// failed is replaced (go-redis refuses to reuse it).
	conn := f.rdb.Conn()
	defer func() { _ = conn.Close() }()
	backoff := 50 * time.Millisecond
	args := func(block time.Duration) *redis.XReadGroupArgs {
		return &redis.XReadGroupArgs{Group: f.cfg.Group, Consumer: consumer, Streams: []string{stream, ">"},
			Count: int64(f.cfg.BatchSize), Block: block}
	}
	var msgs []redis.XMessage
	// A batch already read is served even when ctx has ended meanwhile.
	for ctx.Err() == nil || len(msgs) > 0 {
		var next *redis.XStreamSliceCmd
		if len(msgs) == 0 {
			next = conn.XReadGroup(ctx, args(f.cfg.BlockTimeout))
		} else {
			// In-flight work finishes after cancellation so a graceful stop
			// does not leave answered-but-unacknowledged entries behind.
			work := context.WithoutCancel(ctx)
			pipe := conn.Pipeline()
			finish := h(work, pipe, msgs)
			if len(slots) < cap(slots) && ctx.Err() == nil {
				next = pipe.XReadGroup(work, args(-1)) // -1: no BLOCK
			}
			// Each command carries its own error; h reads its own.
			_, _ = pipe.Exec(work)
			for _, job := range finish() {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					job(work)
				})
			}
			msgs = nil
			if next == nil {
				continue
			}
		}
		res, err := next.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				// The stream was deleted under us (e.g. by hand); recreate it.
				if gerr := f.ensureGroups(ctx); gerr == nil {
					continue
				}
			}
			f.logger.WarnContext(ctx, "read stream failed; retrying", "stream", stream, "error", err, "backoff", backoff)
			_ = conn.Close()
			conn = f.rdb.Conn()
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, s := range res {
			msgs = append(msgs, s.Messages...)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// replyScript sends a reply at most once per (reply_to, id) and
// acknowledges the entry in the same step. It checks before it writes: a
// reply key that is not a stream (someone SET it) gets nothing written, not
// even the "answered" marker, and the entry is acknowledged as unanswerable
// (-1). An XADD that still fails takes the marker back, so the entry stays
// pending and is retried. So a worker dying at any instant leaves either an
// unanswered pending entry (reclaimed later) or an answered, acknowledged
// one — never two replies, never a marker without a reply.
//
// KEYS: replied marker, reply stream, source stream.
// ARGV: group, entry id, marker TTL ms, reply TTL ms, reply MAXLEN, fields…
var replyScript = redis.NewScript(`
local t = redis.call('TYPE', KEYS[2]).ok
if t ~= 'stream' and t ~= 'none' then
  redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
  return -1
end
local first = redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[3])
if first then
  local args = {'XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*'}
  for i = 6, #ARGV do args[#args+1] = ARGV[i] end
  local ok = redis.pcall(unpack(args))
  if type(ok) == 'table' and ok.err then
    redis.call('DEL', KEYS[1])
    return ok
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
if first then return 1 end
return 0
`)

// Results of send.
const (
	sentFirst     = 1  // replied
	sentDuplicate = 0  // (reply_to, id) already answered: no second reply
	sentWrongType = -1 // reply_to is not a stream: nothing written, acknowledged
)

// send replies to r and acknowledges its entry on stream.
func (f *FrontDoor) send(ctx context.Context, stream string, r request, rep reply) (int, error) {
	argv := []any{f.cfg.Group, r.EntryID, f.cfg.IdempotencyTTL.Milliseconds(), f.cfg.ReplyTTL.Milliseconds(), f.cfg.ReplyMaxLen}
	rep.Reason = f.cfg.Redact(rep.Reason)
	argv = append(argv, rep.fields(r.ID, r.replyEntry())...)
	n, err := replyScript.Run(ctx, f.rdb, []string{f.keys.replied(r.ReplyTo, r.ID), r.ReplyTo, stream}, argv...).Int()
	if err != nil {
		return 0, fmt.Errorf("reply to %s: %w", r.ID, err)
	}
	return n, nil
}

// finish sends the reply and records the outcome. The outcome is counted
// before sending so a caller that has the reply also sees the metric; a reply
// dropped because the id was already answered is counted again as duplicate,
// and one that failed to send as retry (the entry stays pending and is
// retried like a failed search).
func (f *FrontDoor) finish(ctx context.Context, stream string, r request, rep reply, outcome string, start time.Time) {
	f.metrics.requests.WithLabelValues(outcome).Inc()
	f.metrics.latency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	sent, err := f.send(ctx, stream, r, rep)
	if err != nil {
		if ctx.Err() == nil {
			f.logger.WarnContext(ctx, "send reply failed; the request stays pending and will be retried", "id", r.ID, "error", err)
		}
		f.metrics.requests.WithLabelValues(outcomeRetry).Inc()
		return
	}
	switch sent {
	case sentDuplicate:
		f.metrics.requests.WithLabelValues(outcomeDuplicate).Inc()
	case sentWrongType:
		f.metrics.requests.WithLabelValues(outcomeInvalid).Inc()
	}
}

func (f *FrontDoor) ack(ctx context.Context, stream, entryID string) {
	if err := f.rdb.XAck(ctx, stream, f.cfg.Group, entryID).Err(); err != nil {
		f.logger.WarnContext(ctx, "ack failed; the entry will be redelivered", "stream", stream, "entry", entryID, "error", err)
	}
}
