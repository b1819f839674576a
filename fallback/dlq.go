package fallback

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fields a dead letter adds to the original request fields.
const (
	fieldDLQReason   = "dlq_reason"
	fieldDLQAttempts = "dlq_attempts"
	fieldDLQEntry    = "dlq_request_entry"
	fieldDLQAt       = "dlq_failed_at_ms"
)

// DeadLetter is one entry of the dead-letter stream.
type DeadLetter struct {
	// EntryID is the entry's id in <prefix>:requests:dlq.
	EntryID string
	// RequestEntryID is the id the request had in <prefix>:requests.
	RequestEntryID string
	// ID, Query and Tenant are the request's fields.
	ID, Query, Tenant string
	// Reason is the last failure; Attempts the deliveries it got.
	Reason   string
	Attempts int
	FailedAt time.Time
	// Fields holds every field of the entry, request fields included.
	Fields map[string]string
}

// deadLetter moves a request entry to the DLQ stream, with the reason and
// attempt count, and acknowledges it — in one MULTI so it is never both
// pending and dead-lettered. The DLQ worker then answers it.
func (f *FrontDoor) deadLetter(ctx context.Context, entryID string, attempts int64, reason string) error {
	msgs, err := f.rdb.XRange(ctx, f.keys.requests(), entryID, entryID).Result()
	if err != nil {
		return fmt.Errorf("dead-letter %s: read entry: %w", entryID, err)
	}
	if reason == "" {
		reason = "unanswered after " + strconv.FormatInt(attempts, 10) + " deliveries"
	}
	if len(msgs) == 0 {
		// Trimmed away: nothing left to answer with; just clear the PEL.
		return f.rdb.XAck(ctx, f.keys.requests(), f.cfg.Group, entryID).Err()
	}
	values := make(map[string]any, len(msgs[0].Values)+4)
	for k, v := range msgs[0].Values {
		values[k] = v
	}
	values[fieldDLQReason] = f.cfg.Redact(reason)
	values[fieldDLQAttempts] = attempts
	if fieldString(values, fieldDLQEntry) == "" {
		// A replayed dead letter keeps the entry id its client knows.
		values[fieldDLQEntry] = entryID
	}
	values[fieldDLQAt] = time.Now().UnixMilli()
	pipe := f.rdb.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.dlq(), MaxLen: f.cfg.DLQMaxLen, Approx: true, Values: values})
	pipe.XAck(ctx, f.keys.requests(), f.cfg.Group, entryID)
	pipe.Del(ctx, f.keys.failure(entryID))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("dead-letter %s: %w", entryID, err)
	}
	f.metrics.deadLetters.Inc()
	return nil
}

// handleDeadLetter answers a dead-lettered request, degraded.
func (f *FrontDoor) handleDeadLetter(ctx context.Context, msg redis.XMessage, _ int64) {
	start := time.Now()
	stream := f.keys.dlq()
	// The deadline is not enforced here: the request was valid when it
	// arrived, and a late degraded answer beats silence.
	r, err := parseRequest(msg.ID, withoutDeadline(msg.Values), f.cfg, start)
	if r.ReplyTo == "" {
		f.ack(ctx, stream, msg.ID)
		return
	}
	if err != nil {
		f.finish(ctx, stream, r, reply{Status: StatusError, Reason: err.Error(), Source: SourceNone}, outcomeInvalid, start)
		return
	}
	gen, _ := f.rdb.Get(ctx, f.keys.generation()).Int64()
	t := f.target.Load()
	rep := f.degrade(ctx, t, r, requestKeys(t.index, gen, r), fieldString(msg.Values, fieldDLQReason))
	if ctx.Err() != nil {
		return // reclaimed and cancelled: left pending, not answered "canceled"
	}
	f.finish(ctx, stream, r, rep, outcomeOf(rep), start)
}

func withoutDeadline(values map[string]any) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		if k != fieldDeadline {
			out[k] = v
		}
	}
	return out
}

// degrade builds the answer when the real search cannot be used: the last
// good answer for the key, less every document since deleted or moved out
// of the request's tenant (see liveHits), else a full-text search (no
// embedding needed), else an error carrying both reasons.
func (f *FrontDoor) degrade(ctx context.Context, t *target, r request, ck cacheKeys, reason string) reply {
	if r.After != nil {
		// A stale answer may predate the change the request waits for,
		// and a full-text one comes from another search than the one
		// asked for: neither is given as if it held the change.
		return reply{Status: StatusError, Source: SourceNone,
			Reason: reason + "; a request with after gets no degraded answer, ask again later"}
	}
	if v, err := f.rdb.Get(ctx, f.keys.stale(ck.base)).Result(); err == nil {
		if hits, err := f.liveHits(ctx, v, r); err == nil && len(hits) > 0 {
			return reply{Status: StatusDegraded, Results: encodeWire(hits, r.K), Cached: true, Source: SourceStale, Reason: reason + "; answered from the last good result"}
		}
	}
	if t.search == nil {
		return reply{Status: StatusError, Source: SourceNone, Reason: reason}
	}
	sctx, cancel := context.WithTimeout(ctx, f.cfg.SearchTimeout)
	defer cancel()
	hits, err := t.search.SearchText(sctx, r.Query, sinkQueryOf(r))
	if err != nil {
		return reply{Status: StatusError, Source: SourceNone, Reason: reason + "; full-text fallback failed: " + err.Error()}
	}
	return reply{Status: StatusDegraded, Results: encodeHits(hits, r.K), Source: SourceFullText, Reason: reason + "; answered by full-text search"}
}

func toDeadLetter(m redis.XMessage) DeadLetter {
	d := DeadLetter{EntryID: m.ID, Fields: make(map[string]string, len(m.Values))}
	for k, v := range m.Values {
		d.Fields[k] = fieldString(m.Values, k)
		_ = v
	}
	d.RequestEntryID = d.Fields[fieldDLQEntry]
	d.ID, d.Query, d.Tenant = d.Fields[fieldID], d.Fields[fieldQuery], d.Fields[fieldTenant]
	d.Reason = d.Fields[fieldDLQReason]
	d.Attempts, _ = strconv.Atoi(d.Fields[fieldDLQAttempts])
	if ms, err := strconv.ParseInt(d.Fields[fieldDLQAt], 10, 64); err == nil {
		d.FailedAt = time.UnixMilli(ms)
	}
	return d
}

// DLQList returns up to n dead letters, oldest first. Dead letters stay in
// the stream after the DLQ worker answered them, until DLQPurge or trimming
// (dlq_max_len).
func (f *FrontDoor) DLQList(ctx context.Context, n int) ([]DeadLetter, error) {
	if n <= 0 {
		return nil, fmt.Errorf("dlq list: n must be > 0, got %d", n)
	}
	msgs, err := f.rdb.XRangeN(ctx, f.keys.dlq(), "-", "+", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("dlq list %s: %w", f.keys.dlq(), err)
	}
	out := make([]DeadLetter, len(msgs))
	for i, m := range msgs {
		out[i] = toDeadLetter(m)
	}
	return out, nil
}

// DLQReplay puts every dead letter back on the request stream (original
// fields, same id and reply_to, and dlq_request_entry so the reply still
// names the entry the client's XADD returned) and removes it from the DLQ; it returns how
// many were replayed. A replayed request whose id was already answered (the
// DLQ worker answers every dead letter) is acknowledged without a second
// reply, so replay only completes requests that were never answered.
func (f *FrontDoor) DLQReplay(ctx context.Context) (int, error) {
	n := 0
	for {
		msgs, err := f.rdb.XRangeN(ctx, f.keys.dlq(), "-", "+", 100).Result()
		if err != nil {
			return n, fmt.Errorf("dlq replay: read: %w", err)
		}
		if len(msgs) == 0 {
			return n, nil
		}
		pipe := f.rdb.TxPipeline()
		for _, m := range msgs {
			values := make(map[string]any, len(m.Values))
			for k, v := range m.Values {
				switch k {
				case fieldDLQReason, fieldDLQAttempts, fieldDLQAt:
				default:
					values[k] = v
				}
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.requests(), Values: values})
			pipe.XAck(ctx, f.keys.dlq(), f.cfg.Group, m.ID)
			pipe.XDel(ctx, f.keys.dlq(), m.ID)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return n, fmt.Errorf("dlq replay: %w", err)
		}
		n += len(msgs)
	}
}

// DLQPurge deletes every dead letter and returns how many there were. The
// stream and its consumer group stay.
func (f *FrontDoor) DLQPurge(ctx context.Context) (int, error) {
	n, err := f.rdb.XTrimMaxLen(ctx, f.keys.dlq(), 0).Result()
	if err != nil {
		return 0, fmt.Errorf("dlq purge %s: %w", f.keys.dlq(), err)
	}
	return int(n), nil
}
