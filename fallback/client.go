package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client sends queries to the front door over the Redis protocol and waits
// for the reply. Each request gets its own reply stream
// (<prefix>:reply:<id>), deleted once read. Safe for concurrent use; rdb
// stays owned by the caller.
type Client struct {
	rdb  *redis.Client
	keys keys
	// RequestMaxLen caps the request stream when adding (MAXLEN ~), so a
	// queue with no front door running cannot grow without bound; beyond it
	// the oldest requests are shed. Defaults to 100000 in NewClient.
	RequestMaxLen int64
	// Poll bounds one blocking XREAD while waiting, and so how quickly a
	// cancelled context is noticed. Defaults to 1s in NewClient.
	Poll time.Duration
}

// NewClient returns a client for the front door at prefix (the front door's
// frontdoor.prefix; "" means "ragsync").
func NewClient(rdb *redis.Client, prefix string) *Client {
	if prefix == "" {
		prefix = "ragsync"
	}
	return &Client{rdb: rdb, keys: keys{prefix: prefix}, RequestMaxLen: 100000, Poll: time.Second}
}

// Search sends q and waits for its reply until ctx ends. The context's
// deadline (or q.Deadline) travels as deadline_ms. A reply with status error
// returns the Result and a *ReplyError; degraded replies return no error —
// check Result.Status.
func (c *Client) Search(ctx context.Context, q Query) (Result, error) {
	id := randomID()
	replyTo := c.keys.reply(id)
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
	add := &redis.XAddArgs{Stream: c.keys.requests(), MaxLen: c.RequestMaxLen, Approx: true, Values: values}
	defer c.rdb.Del(context.WithoutCancel(ctx), replyTo)

	last := "0-0"
	for attempt := 0; ; attempt++ {
		block := c.Poll
		if d, ok := ctx.Deadline(); ok {
			block = min(block, max(time.Until(d), time.Millisecond))
		}
		read := &redis.XReadArgs{Streams: []string{replyTo, last}, Count: 16, Block: block}
		var res []redis.XStream
		var err error
		if attempt == 0 {
			// Send the request and start waiting in one round trip.
			pipe := c.rdb.Pipeline()
			addCmd := pipe.XAdd(ctx, add)
			readCmd := pipe.XRead(ctx, read)
			_, _ = pipe.Exec(ctx)
			if err := addCmd.Err(); err != nil {
				return Result{}, fmt.Errorf("send request %s: %w", id, err)
			}
			res, err = readCmd.Result()
		} else {
			res, err = c.rdb.XRead(ctx, read).Result()
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return Result{}, fmt.Errorf("request %s: %w: %w", id, ErrNoReply, ctx.Err())
			}
			return Result{}, fmt.Errorf("read reply %s: %w", id, err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				if fieldString(m.Values, fieldID) != id {
					continue // a shared reply stream: not ours
				}
				r, err := parseReply(m.Values)
				if err != nil {
					return r, err
				}
				if r.Status == StatusError {
					return r, &ReplyError{ID: id, Reason: r.Reason}
				}
				return r, nil
			}
		}
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("request %s: %w: %w", id, ErrNoReply, ctx.Err())
		}
	}
}
