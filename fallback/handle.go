package fallback

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/internal/fault"
	"github.com/ragsync/ragsync/internal/vector"
	"github.com/ragsync/ragsync/sink"
)

// handleRequest answers one request entry on its own (a reclaimed delivery):
// the batch hit path for a batch of one, then whatever that left to do.
func (f *FrontDoor) handleRequest(ctx context.Context, msg redis.XMessage, deliveries int64) {
	for _, rest := range f.serveBatch(ctx, []redis.XMessage{msg}, deliveries, false) {
		rest(ctx)
	}
}

// lookup is one request of a batch on its way through the hit path.
type lookup struct {
	t       *target
	msg     redis.XMessage
	r       request
	ck      cacheKeys
	replied *redis.IntCmd // only for redeliveries
	serve   *redis.Cmd
	checks  []bloomCheck
}

// serveBatch answers every cache hit among msgs in one round trip of its own
// and returns what is left (see queueServe).
func (f *FrontDoor) serveBatch(ctx context.Context, msgs []redis.XMessage, deliveries int64, reloaded bool) []func(context.Context) {
	pipe := f.rdb.Pipeline()
	finish := f.queueServe(ctx, pipe, msgs, deliveries, reloaded)
	if pipe.Len() > 0 {
		// Each command carries its own error; Exec's is the first of them.
		_, _ = pipe.Exec(ctx)
	}
	return finish()
}

// queueServe puts the whole hit path of msgs on pipe: each request's
// serveScript (lookup + reply + ack, atomic per request, so batching changes
// nothing about exactly-one-reply) and its Bloom checks. The caller sends
// pipe — readLoop sends its next XREADGROUP in the same round trip — and then
// calls the returned func, which reads the results and returns what is left
// — misses, invalid requests, Redis failures — as one func per entry for the
// caller to run, concurrently if it likes: each is independent and answers
// or leaves pending its own entry. deliveries is the delivery count of every
// entry in msgs; reloaded is true when the scripts were just loaded after
// NOSCRIPT, so a second NOSCRIPT is a failure rather than a loop.
func (f *FrontDoor) queueServe(ctx context.Context, pipe redis.Pipeliner, msgs []redis.XMessage, deliveries int64, reloaded bool) func() []func(context.Context) {
	start := time.Now()
	stream := f.keys.requests()
	var rest []func(context.Context)
	lookups := make([]lookup, 0, len(msgs))
	t := f.target.Load()
	for _, msg := range msgs {
		r, err := parseRequest(msg.ID, msg.Values, f.cfg, start)
		if r.ReplyTo == "" {
			// Nowhere to answer: acknowledge so it does not come back forever.
			f.metrics.requests.WithLabelValues(outcomeInvalid).Inc()
			rest = append(rest, func(ctx context.Context) { f.ack(ctx, stream, msg.ID) })
			continue
		}
		if err != nil {
			rest = append(rest, func(ctx context.Context) {
				f.finish(ctx, stream, r, reply{Status: StatusError, Reason: err.Error(), Source: SourceNone}, outcomeInvalid, start)
			})
			continue
		}
		l := lookup{t: t, msg: msg, r: r, ck: cacheKeys{base: baseKey(t.index, r)}}
		if deliveries > 1 {
			// A redelivery may have been answered by a worker that died
			// before its ack reached us (see the miss path below).
			l.replied = pipe.Exists(ctx, f.keys.replied(r.ReplyTo, r.ID))
		}
		if r.After != nil {
			// Neither the cache nor the Bloom filters can be read before
			// the watermark passes: serveAfter reads them then.
			lookups = append(lookups, l)
			continue
		}
		// A cached answer wins over the Bloom filter: it was right when
		// cached and expires with its TTL.
		l.serve = serveScript.EvalSha(ctx, pipe,
			[]string{f.keys.generation(), f.keys.replied(r.ReplyTo, r.ID), r.ReplyTo, stream},
			l.ck.base, f.keys.cache(""), f.cfg.Group, r.EntryID, f.cfg.IdempotencyTTL.Milliseconds(),
			f.cfg.ReplyTTL.Milliseconds(), f.cfg.ReplyMaxLen, r.ID)
		if r.Tenant != "" {
			l.checks = append(l.checks, f.bloom.queueCheck(ctx, pipe, KindTenant, r.Tenant))
		}
		if r.DocID != "" {
			l.checks = append(l.checks, f.bloom.queueCheck(ctx, pipe, KindDoc, r.DocID))
		}
		lookups = append(lookups, l)
	}
	return func() []func(context.Context) {
		return f.finishServe(ctx, lookups, rest, deliveries, reloaded, start)
	}
}

// finishServe reads the results queueServe asked for and adds what they
// left to do to rest.
func (f *FrontDoor) finishServe(ctx context.Context, lookups []lookup, rest []func(context.Context), deliveries int64, reloaded bool, start time.Time) []func(context.Context) {
	stream := f.keys.requests()
	reload := sync.OnceValue(func() error { return serveScript.Load(ctx, f.rdb).Err() })
	for _, l := range lookups {
		if l.replied != nil && l.replied.Val() == 1 {
			// Skip the work; the reply script would drop a second reply
			// anyway. A hit was already acknowledged by serveScript.
			f.metrics.requests.WithLabelValues(outcomeDuplicate).Inc()
			rest = append(rest, func(ctx context.Context) { f.ack(ctx, stream, l.msg.ID) })
			continue
		}
		if l.r.After != nil {
			rest = append(rest, func(ctx context.Context) { f.serveAfter(ctx, l, deliveries, start) })
			continue
		}
		if !reloaded && redis.HasErrorPrefix(l.serve.Err(), "NOSCRIPT") && reload() == nil {
			// Redis restarted or flushed its script cache: retry once.
			rest = append(rest, func(ctx context.Context) {
				for _, r := range f.serveBatch(ctx, []redis.XMessage{l.msg}, deliveries, true) {
					r(ctx)
				}
			})
			continue
		}
		res, err := l.serve.Slice()
		if err != nil || len(res) != 3 {
			cause := fmt.Errorf("read cache: %w", cmpErr(err))
			rest = append(rest, func(ctx context.Context) { f.retryLater(ctx, l.r, deliveries, cause) })
			continue
		}
		l.ck.fresh, _ = res[0].(string)
		if hit, _ := res[1].(int64); hit != 0 {
			outcome := outcomeHit
			if hit == 2 {
				outcome = outcomeNegativeHit
			}
			f.metrics.requests.WithLabelValues(outcome).Inc()
			f.metrics.latency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
			if first, _ := res[2].(int64); first == sentDuplicate {
				f.metrics.requests.WithLabelValues(outcomeDuplicate).Inc()
			}
			continue
		}
		if first, _ := res[2].(int64); first == sentWrongType {
			// reply_to is not a stream: acknowledged by the script, with
			// nothing written; there is nowhere to answer.
			f.metrics.requests.WithLabelValues(outcomeInvalid).Inc()
			continue
		}
		rest = append(rest, func(ctx context.Context) { f.handleMiss(ctx, l, deliveries, start) })
	}
	return rest
}

// handleMiss answers a request the cache could not: Bloom filter, breaker,
// then a coalesced search. A failed search leaves the entry pending (no ack)
// so XAUTOCLAIM retries it, until the last delivery dead-letters it.
func (f *FrontDoor) handleMiss(ctx context.Context, l lookup, deliveries int64, start time.Time) {
	f.answerMiss(ctx, l, deliveries, start, f.coalescedSearch)
}

// searchFunc searches for r and says where the results came from.
type searchFunc func(ctx context.Context, t *target, r request, ck cacheKeys) ([]byte, string, error)

// answerMiss is handleMiss with the search given: coalescedSearch, or
// searchAfter for a request with after.
func (f *FrontDoor) answerMiss(ctx context.Context, l lookup, deliveries int64, start time.Time, search searchFunc) {
	stream := f.keys.requests()
	r, ck := l.r, l.ck
	ctx, span := startMissSpan(ctx, r.TraceParent)
	defer span.End()
	for _, c := range l.checks {
		if ok, err := c.mayContain(); err == nil && !ok {
			f.finish(ctx, stream, r, reply{Status: StatusOK, Results: emptyResults, Source: SourceBloom}, outcomeBloomReject, start)
			return
		}
	}

	if !f.breaker.Allow() {
		rep := f.degrade(ctx, l.t, r, ck, "circuit breaker open: the embedder or pgvector keeps failing")
		if ctx.Err() != nil {
			return // reclaimed and cancelled: left pending
		}
		f.finish(ctx, stream, r, rep, outcomeOf(rep), start)
		return
	}
	results, source, err := search(ctx, l.t, r, ck)
	// The leader's searchVector reported to the breaker; a follower (or a
	// Redis failure before any search) only gives its probe back.
	f.breaker.Release()
	if errors.Is(err, sink.ErrTenantRequired) {
		// Fail closed: an index with tenants never answers across them.
		rep := reply{Status: StatusError, Reason: (&InvalidRequestError{Field: fieldTenant, Reason: tenantRequired}).Error(), Source: SourceNone}
		f.finish(ctx, stream, r, rep, outcomeInvalid, start)
		return
	}
	if errors.Is(err, sink.ErrInvalidQuery) {
		// Postgres refused the request's input as data: the request's
		// fault, answered at once, not retried and not held against the
		// database (searchVector did not tell the breaker).
		f.finish(ctx, stream, r, reply{Status: StatusError, Reason: "invalid request: " + err.Error(), Source: SourceNone}, outcomeInvalid, start)
		return
	}
	if err != nil {
		f.retryLater(ctx, r, deliveries, err)
		return
	}
	if f.afterSearch != nil && f.afterSearch(r) {
		return
	}
	outcome := outcomeMiss
	if source == SourceShared {
		outcome = outcomeCoalesced
	}
	f.finish(ctx, stream, r, reply{Status: StatusOK, Results: results, Cached: source == SourceShared, Source: source}, outcome, start)
}

// tenantRequired is the reason a request without a tenant is refused on
// an index that holds documents of tenants.
const tenantRequired = "required: this index holds documents of tenants, and an answer without one would mix them; send the tenant field"

// serveScript is the whole hit path in one round trip: read the index
// generation, derive the fresh cache key from it (see freshKey), read the
// entry and, if there is one, reply and acknowledge exactly like
// replyScript. Returns {fresh key, 0 miss | 1 hit | 2 negative hit,
// 1 replied | 0 id already answered | -1 reply_to is not a stream}; on -1
// nothing was written and the entry is acknowledged.
//
// KEYS: generation, replied marker, reply stream, request stream.
// ARGV: base hash, cache key prefix, group, entry id, marker TTL ms,
// reply TTL ms, reply MAXLEN, request id.
var serveScript = redis.NewScript(`
local t = redis.call('TYPE', KEYS[3]).ok
if t ~= 'stream' and t ~= 'none' then
  redis.call('XACK', KEYS[4], ARGV[3], ARGV[4])
  return {'', 0, -1}
end
local gen = redis.call('GET', KEYS[1]) or '0'
local fresh = redis.sha1hex(ARGV[1] .. ':' .. gen)
local v = redis.call('GET', ARGV[2] .. fresh)
if not v then return {fresh, 0, 0} end
local first = 0
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[5]) then
  local ok = redis.pcall('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'id', ARGV[8], 'entry', ARGV[4], 'status', 'ok', 'results', v, 'cached', 'true', 'source', 'cache')
  if type(ok) == 'table' and ok.err then
    -- No marker without a reply: the entry stays pending and is retried.
    redis.call('DEL', KEYS[2])
    return ok
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  first = 1
end
redis.call('XACK', KEYS[4], ARGV[3], ARGV[4])
local kind = 1
if v == '[]' then kind = 2 end
return {fresh, kind, first}
`)

func cmpErr(errs ...error) error { // first non-nil error, or a generic one
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return errors.New("unexpected reply")
}

func outcomeOf(rep reply) string {
	if rep.Status == StatusError {
		return outcomeError
	}
	return outcomeDegraded
}

// retryLater leaves the entry pending for another delivery, remembering the
// reason for the dead letter; on the last allowed delivery it dead-letters
// the request at once instead of waiting min_idle once more.
func (f *FrontDoor) retryLater(ctx context.Context, r request, deliveries int64, cause error) {
	f.metrics.requests.WithLabelValues(outcomeRetry).Inc()
	if ctx.Err() != nil {
		// Shutting down (a reclaimed request's search was cancelled): not
		// the request's failure. It stays pending for the next front door.
		return
	}
	if deliveries >= int64(f.cfg.MaxDeliveries) {
		if err := f.deadLetter(ctx, r.EntryID, deliveries, cause.Error()); err != nil {
			f.logger.WarnContext(ctx, "dead-letter failed; the request stays pending", "id", r.ID, "error", err)
		}
		return
	}
	ttl := f.cfg.MinIdle*time.Duration(f.cfg.MaxDeliveries+1) + time.Minute
	if err := f.rdb.Set(ctx, f.keys.failure(r.EntryID), f.cfg.Redact(cause.Error()), ttl).Err(); err != nil {
		f.logger.WarnContext(ctx, "record failure reason", "id", r.ID, "error", err)
	}
}

// coalescedSearch runs at most one embed+search per cache key in this process
// (singleflight) and, through a Redis lock, across processes.
func (f *FrontDoor) coalescedSearch(ctx context.Context, t *target, r request, ck cacheKeys) ([]byte, string, error) {
	type out struct {
		results []byte
		source  string
	}
	v, err, shared := f.sf.Do(ck.fresh, func() (any, error) {
		res, src, err := f.lockedSearch(ctx, t, r, ck)
		return out{res, src}, err
	})
	if err != nil {
		return nil, "", err
	}
	o := v.(out)
	if shared {
		return o.results, SourceShared, nil
	}
	return o.results, o.source, nil
}

// releaseScript deletes the lock only if we still own it, so a lock that
// expired and was taken by another worker is not released by us.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// lockedSearch takes the cross-worker miss lock (SET NX PX) and searches, or
// waits for the holder's result to appear in the cache.
func (f *FrontDoor) lockedSearch(ctx context.Context, t *target, r request, ck cacheKeys) ([]byte, string, error) {
	lockKey, cacheKey := f.keys.lock(ck.fresh), f.keys.cache(ck.fresh)
	token := randomID()
	deadline := time.Now().Add(f.cfg.LockWait)
	wait := time.Millisecond
	for {
		ok, err := f.rdb.SetNX(ctx, lockKey, token, f.cfg.LockTTL).Result()
		if err != nil {
			return nil, "", fmt.Errorf("take search lock: %w", err)
		}
		if ok {
			return f.searchAndStore(ctx, t, r, ck, lockKey, token)
		}
		// Another worker is searching: wait for its result or its release.
		for {
			if !sleep(ctx, wait) {
				return nil, "", ctx.Err()
			}
			wait = min(wait*2, 20*time.Millisecond)
			pipe := f.rdb.Pipeline()
			got := pipe.Get(ctx, cacheKey)
			held := pipe.Exists(ctx, lockKey)
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, "", fmt.Errorf("wait for coalesced search: %w", err)
			}
			if v, err := got.Bytes(); err == nil {
				return v, SourceShared, nil
			}
			if time.Now().After(deadline) {
				return nil, "", errLockWait
			}
			if held.Val() == 0 {
				break // the holder failed or its lock expired: try to take it
			}
		}
	}
}

func (f *FrontDoor) searchAndStore(ctx context.Context, t *target, r request, ck cacheKeys, lockKey, token string) ([]byte, string, error) {
	release := func() { _ = releaseScript.Run(ctx, f.rdb, []string{lockKey}, token).Err() }
	// Double-check: the previous holder may have stored the result between
	// our cache miss and our lock.
	if v, err := f.rdb.Get(ctx, f.keys.cache(ck.fresh)).Bytes(); err == nil {
		release()
		return v, SourceShared, nil
	}
	// Read before the search begins: the index held at least what this
	// reading says when the search started.
	snap, _, _ := f.marks.current()
	results, err := f.searchVector(ctx, t, r)
	if err != nil {
		release()
		return nil, "", err
	}
	if !f.storeResult(ctx, r, ck, results, snap, func(pipe redis.Pipeliner) {
		// Release after the result is visible, inside the same MULTI, so a
		// waiter never sees "no lock, no result" for a successful search.
		releaseScript.Eval(ctx, pipe, []string{lockKey}, token)
	}) {
		release()
	}
	return results, SourceSearch, nil
}

// storeResult caches a search's results (and, when not empty, keeps them
// as the stale answer) with the reading of the watermark taken before the
// search began, in one MULTI with whatever also adds; without a reading
// it drops the one an earlier entry left, so no entry carries another's.
// It reports whether the MULTI ran; a failure is logged, the answer is
// good anyway.
func (f *FrontDoor) storeResult(ctx context.Context, r request, ck cacheKeys, results []byte, snap *markSnapshot, also func(redis.Pipeliner)) bool {
	pipe := f.rdb.TxPipeline()
	ttl := jitter(f.cfg.CacheTTL, f.cfg.CacheJitter)
	if bytes.Equal(results, emptyResults) {
		ttl = jitter(f.cfg.NegativeTTL, f.cfg.CacheJitter)
	} else {
		pipe.Set(ctx, f.keys.stale(ck.base), results, f.cfg.StaleTTL)
	}
	pipe.Set(ctx, f.keys.cache(ck.fresh), results, ttl)
	if b := encodeSnapshotOf(snap); b != nil {
		pipe.Set(ctx, f.keys.cacheMarks(ck.fresh), b, ttl)
	} else {
		pipe.Del(ctx, f.keys.cacheMarks(ck.fresh))
	}
	if also != nil {
		also(pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		f.logger.WarnContext(ctx, "store search result in cache", "id", r.ID, "error", err)
		return false
	}
	return true
}

// searchVector embeds the query (through the embedding cache) and runs the
// vector search, feeding the breaker.
func (f *FrontDoor) searchVector(parent context.Context, t *target, r request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(parent, f.cfg.SearchTimeout)
	defer cancel()
	vec, err := f.embed(ctx, t, r.Query)
	if err != nil {
		if parent.Err() == nil && !errors.Is(err, sink.ErrInvalidQuery) {
			f.breaker.Failure()
		}
		return nil, err
	}
	hits, err := t.search.Search(ctx, vec, sinkQueryOf(r))
	if errors.Is(err, sink.ErrInvalidQuery) || (err != nil && parent.Err() != nil) {
		// The request's input, or a shutdown, not the database: no
		// verdict for the breaker.
		return nil, fmt.Errorf("vector search: %w", err)
	}
	if err != nil {
		f.breaker.Failure()
		return nil, fmt.Errorf("vector search: %w", err)
	}
	f.breaker.Success()
	return encodeHits(hits, r.K), nil
}

// sinkQueryOf is the search a request asks for; the document filter runs in
// SQL, so the K hits are the best of that document.
func sinkQueryOf(r request) sinkQuery {
	return sinkQuery{K: r.K, Tenant: r.Tenant, Filter: r.Filter, Table: r.Table, DocID: r.DocID}
}

func (f *FrontDoor) embed(ctx context.Context, t *target, text string) ([]float32, error) {
	key := f.keys.embeddingOf(t.index, text)
	if b, err := f.rdb.Get(ctx, key).Bytes(); err == nil {
		if v, ok := decodeVector(b); ok {
			f.metrics.embeddings.WithLabelValues("cache").Inc()
			return v, nil
		}
	}
	vecs, err := t.emb.Embed(ctx, []string{text})
	if fault.Of(err) == fault.Input {
		// The text itself cannot be embedded (or the provider answers it
		// with a vector that cannot be searched): the request's fault,
		// answered at once rather than retried and dead-lettered.
		return nil, fmt.Errorf("%w: embed query: %w", sink.ErrInvalidQuery, err)
	}
	if err != nil {
		return nil, fmt.Errorf("embed query: %w", err)
	}
	if len(vecs) != 1 || len(vecs[0]) == 0 {
		return nil, fmt.Errorf("embed query: got %d vectors for 1 text", len(vecs))
	}
	if why := vector.Unsearchable(vecs[0]); why != "" {
		return nil, fmt.Errorf("%w: the query text embeds to %s", sink.ErrInvalidQuery, why)
	}
	f.metrics.embeddings.WithLabelValues("computed").Inc()
	if err := f.rdb.Set(ctx, key, encodeVector(vecs[0]), f.cfg.EmbeddingTTL).Err(); err != nil {
		f.logger.WarnContext(ctx, "cache query embedding", "error", err)
	}
	return vecs[0], nil
}

// jitter adds up to frac×d at random so entries written in one burst do not
// all expire in the same instant (and stampede the database together).
func jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(float64(d)*frac)+1))
}

// encodeVector stores a query embedding as little-endian float32s.
func encodeVector(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func decodeVector(b []byte) ([]float32, bool) {
	if len(b) == 0 || len(b)%4 != 0 {
		return nil, false
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, true
}
