package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client sends queries to the front door over the Redis protocol and waits
// for the replies. All replies to one Client arrive on one reply stream
// (<prefix>:reply:<client uuid>) read by one background reader, which
// matches them to waiting calls by request id; requests go out through one
// background sender, which puts every request queued while its previous
// round trip was in flight into one pipeline. So concurrent calls share round
// trips both ways: under load a request costs a fraction of an XADD round
// trip and of an XREAD. Safe for concurrent use. Close stops the reader and
// the sender and deletes the reply stream; rdb stays owned by the caller.
//
// A reply is taken only if it names the entry id the request's XADD
// returned: another client reusing an id (by accident or on purpose) and
// replying onto this client's stream cannot stand in for the real answer.
// That guards against mistakes, not attackers: whoever can write to the
// Redis database can write to any reply stream (see the README).
type Client struct {
	rdb     *redis.Client
	keys    keys
	replyTo string
	// ReplyPrefix is the front door's frontdoor.reply_prefix: the reply
	// stream is ReplyPrefix + a random UUID. Set it before the first
	// Search. Defaults to "<prefix>:reply:" in NewClient.
	ReplyPrefix string
	// RequestMaxLen caps the request stream when adding (MAXLEN ~), so a
	// queue with no front door running cannot grow without bound; beyond it
	// the oldest requests are shed. Defaults to 100000 in NewClient.
	RequestMaxLen int64
	// Poll bounds one blocking XREAD of the reader, and so how long Close
	// takes. Set it before the first Search. Defaults to 1s in NewClient.
	Poll time.Duration

	mu      sync.Mutex
	waiters map[string]chan map[string]any
	running bool
	closed  bool
	stop    context.CancelFunc
	done    sync.WaitGroup // the reader and the sender
	sends   chan *outgoing
}

// outgoing is one request waiting for the sender.
type outgoing struct {
	values []any
	sent   chan sendResult // buffered: the sender never waits for the caller
}

// sendResult is how an XADD went: the entry id it returned, and whether
// the request may have been added twice (a retry after a failed
// connection), in which case the front door answers the other entry.
type sendResult struct {
	entry     string
	ambiguous bool
	err       error
}

// maxSendBatch bounds one pipeline of the sender, so one round trip's
// payload stays small next to Redis's client query buffer.
const maxSendBatch = 128

// NewClient returns a client for the front door at prefix (the front door's
// frontdoor.prefix; "" means "ragsync"). The reader starts with the first
// Search.
func NewClient(rdb *redis.Client, prefix string) *Client {
	if prefix == "" {
		prefix = "ragsync"
	}
	k := keys{prefix: prefix}
	return &Client{rdb: rdb, keys: k, ReplyPrefix: prefix + ":reply:", RequestMaxLen: 100000, Poll: time.Second,
		waiters: map[string]chan map[string]any{}, sends: make(chan *outgoing, maxSendBatch)}
}

// replyStream names the reply stream on first use, under mu.
func (c *Client) replyStream() string {
	if c.replyTo == "" {
		c.replyTo = c.ReplyPrefix + randomID()
	}
	return c.replyTo
}

// errClientClosed is returned by Search after Close.
var errClientClosed = errors.New("front door client is closed")

// Search sends q and waits for its reply until ctx ends. The context's
// deadline (or q.Deadline, whichever is earlier) travels as deadline_ms. A
// reply with status error returns the Result and a *ReplyError; degraded
// and not_yet replies return no error — check Result.Status.
func (c *Client) Search(ctx context.Context, q Query) (Result, error) {
	id := randomID()
	c.mu.Lock()
	replyTo := c.replyStream()
	c.mu.Unlock()
	values := []any{fieldID, id, fieldQuery, q.Text, fieldK, strconv.Itoa(q.K), fieldReplyTo, replyTo}
	if len(q.Filter) > 0 {
		b, err := json.Marshal(q.Filter)
		if err != nil {
			return Result{}, fmt.Errorf("encode filter: %w", err)
		}
		values = append(values, fieldFilter, string(b))
	}
	if q.Tenant != "" {
		values = append(values, fieldTenant, q.Tenant)
	}
	deadline := q.Deadline
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	if !deadline.IsZero() {
		values = append(values, fieldDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
	}
	if q.TraceParent != "" {
		values = append(values, fieldTraceParent, q.TraceParent)
	}
	if q.After != "" {
		values = append(values, fieldAfter, q.After)
		if q.AfterTimeout != 0 {
			values = append(values, fieldAfterWait, strconv.FormatInt(max(q.AfterTimeout.Milliseconds(), 0), 10))
		}
	}

	// Register before sending: the reply may beat the XADD's own reply.
	// Room for a few: a reused id can bring replies that are not ours.
	ch := make(chan map[string]any, 4)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Result{}, errClientClosed
	}
	c.waiters[id] = ch
	if !c.running {
		c.running = true
		rctx, cancel := context.WithCancel(context.Background())
		c.stop = cancel
		c.done.Add(2)
		go func() { defer c.done.Done(); c.read(rctx) }()
		go func() { defer c.done.Done(); c.send(rctx) }()
	}
	// Queued under mu so Close (which takes mu before stopping the sender)
	// cannot slip between the closed check and the queueing and leave this
	// request queued with no sender. The sender never takes mu, so a full
	// queue drains.
	out := &outgoing{values: values, sent: make(chan sendResult, 1)}
	select {
	case c.sends <- out:
	case <-ctx.Done():
		delete(c.waiters, id)
		c.mu.Unlock()
		return Result{}, fmt.Errorf("send request %s: %w", id, ctx.Err())
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}()

	// Replies may beat the XADD's own reply; they wait in early until the
	// entry id is known.
	var (
		sent   *sendResult
		early  []map[string]any
		fields map[string]any
	)
	ours := func(f map[string]any) bool {
		e := fieldString(f, fieldEntry)
		// No entry field: a front door from before the field existed.
		return sent.ambiguous || e == "" || e == sent.entry
	}
	for fields == nil {
		select {
		case res := <-out.sent:
			if res.err != nil {
				return Result{}, fmt.Errorf("send request %s: %w", id, res.err)
			}
			sent = &res
			for _, f := range early {
				if ours(f) {
					fields = f
					break
				}
			}
			early = nil
		case f := <-ch:
			switch {
			case sent == nil:
				early = append(early, f)
			case ours(f):
				fields = f
			}
		case <-ctx.Done():
			return Result{}, fmt.Errorf("request %s: %w: %w", id, ErrNoReply, ctx.Err())
		}
	}
	// Decoding here rather than in the reader spreads it over the callers'
	// goroutines: results are a few KB of JSON, and decoding them one after
	// another in the reader delayed every reply behind the others of its
	// XREAD batch.
	r, err := parseReply(fields)
	if err != nil {
		r = Result{ID: id, Status: StatusError, Reason: err.Error(), Source: SourceNone}
	}
	if r.Status == StatusError {
		return r, &ReplyError{ID: id, Reason: r.Reason}
	}
	return r, nil
}

// send XADDs queued requests until ctx ends, in one pipeline per batch: the
// requests that queued up during one round trip go out together in the next.
// After ctx ends it fails what is still queued, so no caller waits for a
// send that will not happen (Search refuses new requests once closed).
func (c *Client) send(ctx context.Context) {
	// A connection of its own, as in the front door's read loop: no pool
	// health-check syscall per round trip. Replaced when it fails.
	conn := c.rdb.Conn()
	defer func() { _ = conn.Close() }()
	batch := make([]*outgoing, 0, maxSendBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			for {
				select {
				case o := <-c.sends:
					o.sent <- sendResult{err: errClientClosed}
				default:
					return
				}
			}
		case o := <-c.sends:
			batch = append(batch, o)
		}
	fill:
		for len(batch) < maxSendBatch {
			select {
			case o := <-c.sends:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		// Not ctx: Close must not abort a pipeline half-written, and each
		// caller stops waiting on its own context.
		cmds, err := c.sendBatch(conn, batch)
		ambiguous := false
		if err != nil && !isRedisError(err) {
			// The connection failed (go-redis would have retried on a
			// fresh one from the pool): once more on a new one. A request
			// whose XADD did land is then queued twice, and the front door
			// answers its id once.
			_ = conn.Close()
			conn = c.rdb.Conn()
			cmds, _ = c.sendBatch(conn, batch)
			ambiguous = true
		}
		for i, o := range batch {
			entry, err := cmds[i].Result()
			o.sent <- sendResult{entry: entry, ambiguous: ambiguous, err: err}
		}
	}
}

// sendBatch XADDs batch in one pipeline and returns each request's command
// and the first error.
func (c *Client) sendBatch(conn *redis.Conn, batch []*outgoing) ([]*redis.StringCmd, error) {
	pipe := conn.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for i, o := range batch {
		cmds[i] = pipe.XAdd(context.Background(), &redis.XAddArgs{
			Stream: c.keys.requests(), MaxLen: c.RequestMaxLen, Approx: true, Values: o.values,
		})
	}
	_, err := pipe.Exec(context.Background())
	return cmds, err
}

// read delivers replies to waiting calls until ctx ends. Replies nobody waits
// for any more (the caller gave up) are dropped; the front door trims the
// stream with MAXLEN ~ and expires it when the client is gone.
func (c *Client) read(ctx context.Context) {
	last := "0-0" // the stream is this client's alone: everything in it is ours
	backoff := 50 * time.Millisecond
	conn := c.rdb.Conn()
	defer func() { _ = conn.Close() }()
	c.mu.Lock()
	replyTo := c.replyStream()
	c.mu.Unlock()
	for ctx.Err() == nil {
		res, err := conn.XRead(ctx, &redis.XReadArgs{Streams: []string{replyTo, last}, Count: 256, Block: c.Poll}).Result()
		if err != nil {
			if errors.Is(err, redis.Nil) || ctx.Err() != nil {
				continue
			}
			// Waiters time out on their own contexts; keep trying.
			_ = conn.Close()
			conn = c.rdb.Conn()
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				id := fieldString(m.Values, fieldID)
				c.mu.Lock()
				ch := c.waiters[id]
				c.mu.Unlock()
				if ch != nil {
					select {
					case ch <- m.Values:
					default: // the caller already has more than it needs
					}
				}
			}
		}
	}
}

// Close stops the reader (at once: it wakes it with an entry on the reply
// stream; at most Poll when that write fails) and the sender (after the
// round trip it has in flight), and deletes the reply stream. Requests not
// sent yet fail at once; searches in flight end with ErrNoReply when their
// context ends; later ones fail.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	running := c.running
	replyTo := c.replyTo
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if running {
		c.stop()
		// Wake the reader out of its blocking XREAD with an entry no
		// request waits for: otherwise Close lasts up to Poll (and Redis
		// rounds the block timeout up to its cron tick), which made a
		// one-shot `ragsync query --via redis` take ~1.1 s on a cache hit.
		if replyTo != "" {
			_ = c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: replyTo, Values: []any{"wake", "1"}}).Err()
		}
		c.done.Wait()
	}
	if replyTo == "" {
		return nil // never searched
	}
	if err := c.rdb.Del(ctx, replyTo).Err(); err != nil {
		return fmt.Errorf("delete reply stream %s: %w", replyTo, err)
	}
	return nil
}

// isRedisError tells a reply Redis sent (the connection is fine) from a
// failure of the connection itself.
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
