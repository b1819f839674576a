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
// matches them to waiting calls by request id: a request costs one XADD, and
// the reader's XREAD is shared by every request in flight. Safe for
// concurrent use. Close stops the reader and deletes the reply stream; rdb
// stays owned by the caller.
type Client struct {
	rdb     *redis.Client
	keys    keys
	replyTo string
	// RequestMaxLen caps the request stream when adding (MAXLEN ~), so a
	// queue with no front door running cannot grow without bound; beyond it
	// the oldest requests are shed. Defaults to 100000 in NewClient.
	RequestMaxLen int64
	// Poll bounds one blocking XREAD of the reader, and so how long Close
	// takes. Set it before the first Search. Defaults to 1s in NewClient.
	Poll time.Duration

	mu      sync.Mutex
	waiters map[string]chan Result
	running bool
	closed  bool
	stop    context.CancelFunc
	done    chan struct{}
}

// NewClient returns a client for the front door at prefix (the front door's
// frontdoor.prefix; "" means "ragsync"). The reader starts with the first
// Search.
func NewClient(rdb *redis.Client, prefix string) *Client {
	if prefix == "" {
		prefix = "ragsync"
	}
	k := keys{prefix: prefix}
	return &Client{rdb: rdb, keys: k, replyTo: k.reply(randomID()), RequestMaxLen: 100000, Poll: time.Second,
		waiters: map[string]chan Result{}}
}

// errClientClosed is returned by Search after Close.
var errClientClosed = errors.New("front door client is closed")

// Search sends q and waits for its reply until ctx ends. The context's
// deadline (or q.Deadline, whichever is earlier) travels as deadline_ms. A
// reply with status error returns the Result and a *ReplyError; degraded
// replies return no error — check Result.Status.
func (c *Client) Search(ctx context.Context, q Query) (Result, error) {
	id := randomID()
	values := []any{fieldID, id, fieldQuery, q.Text, fieldK, strconv.Itoa(q.K), fieldReplyTo, c.replyTo}
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

	// Register before sending: the reply may beat the XADD's own reply.
	ch := make(chan Result, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Result{}, errClientClosed
	}
	c.waiters[id] = ch
	if !c.running {
		c.running = true
		rctx, cancel := context.WithCancel(context.Background())
		c.stop, c.done = cancel, make(chan struct{})
		go c.read(rctx)
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}()

	if err := c.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: c.keys.requests(), MaxLen: c.RequestMaxLen, Approx: true, Values: values,
	}).Err(); err != nil {
		return Result{}, fmt.Errorf("send request %s: %w", id, err)
	}
	select {
	case r := <-ch:
		if r.Status == StatusError {
			return r, &ReplyError{ID: id, Reason: r.Reason}
		}
		return r, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("request %s: %w: %w", id, ErrNoReply, ctx.Err())
	}
}

// read delivers replies to waiting calls until Close. Replies nobody waits
// for any more (the caller gave up) are dropped; the front door trims the
// stream with MAXLEN ~ and expires it when the client is gone.
func (c *Client) read(ctx context.Context) {
	defer close(c.done)
	last := "0-0" // the stream is this client's alone: everything in it is ours
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{c.replyTo, last}, Count: 256, Block: c.Poll}).Result()
		if err != nil {
			if errors.Is(err, redis.Nil) || ctx.Err() != nil {
				continue
			}
			// Waiters time out on their own contexts; keep trying.
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
				r, err := parseReply(m.Values)
				if err != nil && r.ID == "" {
					continue
				}
				if err != nil {
					r = Result{ID: r.ID, Status: StatusError, Reason: err.Error(), Source: SourceNone}
				}
				c.mu.Lock()
				ch := c.waiters[r.ID]
				c.mu.Unlock()
				if ch != nil {
					select {
					case ch <- r:
					default: // a duplicate; the first reply won
					}
				}
			}
		}
	}
}

// Close stops the reader (waiting at most Poll) and deletes the reply
// stream. Searches in flight end with ErrNoReply when their context ends;
// later ones fail.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	running := c.running
	c.mu.Unlock()
	if running {
		c.stop()
		<-c.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.rdb.Del(ctx, c.replyTo).Err(); err != nil {
		return fmt.Errorf("delete reply stream %s: %w", c.replyTo, err)
	}
	return nil
}
