package embedder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CoalesceConfig tunes a Coalescer.
type CoalesceConfig struct {
	// Linger is how long the oldest waiting text may wait for texts of
	// other calls before a request goes out with what it has. A full
	// request goes at once. Defaults to 20ms.
	Linger time.Duration
	// MaxInFlight bounds the requests sent and not yet answered. While all
	// the requests allowed are busy, texts queue and leave together when
	// one returns. MinInFlight requests are allowed whatever they carry;
	// more only while full requests wait (demand that the requests in
	// flight cannot carry), up to as many as let a full request leave every
	// Linger while each takes the provider's observed latency (Little's
	// law: latency ÷ Linger), no more than the rate limits can serve (see
	// InFlightLimit). A slower provider then gets more requests in flight
	// instead of capping a backlog's throughput at MinInFlight requests per
	// latency. MaxInFlight × MaxBatchInputs also bounds the vectors being
	// received at once (memory). Defaults to 32.
	MaxInFlight int
	// MinInFlight is the requests allowed in flight whatever they carry:
	// before any latency is observed, while no full request waits, and
	// whenever the provider answers in under MinInFlight × Linger.
	// Defaults to 4, at most MaxInFlight.
	MinInFlight int
	// RequestsPerMinute and TokensPerMinute are the wrapped client's
	// rate limits (0: none). Requests beyond what they let through only
	// wait at the client's limiter, their texts fixed, so the requests
	// allowed stay within rate × latency + 1.
	RequestsPerMinute int
	TokensPerMinute   int
	// MaxBatchInputs and MaxBatchTokens bound one request, as the wrapped
	// client's Config does. Default to 256 and 250000.
	MaxBatchInputs int
	MaxBatchTokens int
	// Keep, when set, receives every answered request's distinct texts and
	// their vectors before the callers do and before the request's slot is
	// freed. A backfill keeps them in the embedding cache this way: the
	// answers a crash can lose are then at most the MaxInFlight requests
	// being sent or kept, however long the documents that asked for them
	// wait for the index afterwards. Its error is not the callers': they
	// get their vectors regardless (their own write caches them too), and
	// the failure is counted in CoalesceStats.KeepFailures.
	Keep func(ctx context.Context, texts []string, vecs [][]float32) error
	// Lane is the budget lane of calls whose context names none, as the
	// wrapped client's Config.Lane: a shared request goes in the highest
	// lane among the calls it carries. Defaults to LaneLive.
	Lane Lane
}

func (c CoalesceConfig) withDefaults() CoalesceConfig {
	if c.Linger <= 0 {
		c.Linger = 20 * time.Millisecond
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 32
	}
	if c.MinInFlight <= 0 {
		c.MinInFlight = 4
	}
	c.MinInFlight = min(c.MinInFlight, c.MaxInFlight)
	if c.MaxBatchInputs <= 0 {
		c.MaxBatchInputs = 256
	}
	if c.MaxBatchTokens <= 0 {
		c.MaxBatchTokens = 250_000
	}
	return c
}

// Coalescer lets concurrent Embed calls share requests: each call's texts
// join a queue, and requests of up to MaxBatchInputs texts and
// MaxBatchTokens tokens go to the wrapped Client as soon as one is full, or
// once the oldest text has waited Linger, with as many in flight as the
// provider's observed latency needs (see CoalesceConfig.MaxInFlight). One
// call per document then costs a fraction of a request, where it cost at
// least one (a load once sent 2,000 requests for 9,387 inputs).
//
// Every call still returns only its own vectors, or the error of a request
// that carried its texts: a failure never reaches calls whose texts were in
// other requests. When a shared request fails permanently because of one
// input (an InputError, or a 4xx other than auth or model errors), the
// other calls' texts are sent again without it, so only the culprit's
// document is dead-lettered. A call whose ctx ends returns at once; its
// texts leave the queue, and a request whose callers have all gone is
// cancelled.
//
// It is safe for concurrent use. Close stops it; it does not close the
// wrapped Client.
type Coalescer struct {
	client Client
	cfg    CoalesceConfig
	freed  chan struct{} // a request finished, or more are allowed
	wake   chan struct{} // the queue changed
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	queue  []*part
	closed bool
	// busy counts the requests in flight; latency and tokensPerRequest
	// are moving averages of the answered ones (zero: none yet), from
	// which limit, the requests allowed, follows.
	busy             int
	latency          time.Duration
	tokensPerRequest float64
	limit            int

	calls, requests, inputs, shared, keepFailures atomic.Int64
}

// part is a run of one call's texts that fits one request alone.
type part struct {
	ctx    context.Context // the caller's: trace values, and whether it still waits
	texts  []string
	tokens []int
	sum    int
	offset int // index of texts[0] in the call
	at     time.Time
	gone   atomic.Bool // the caller returned
	res    chan partResult
}

type partResult struct {
	vecs [][]float32
	err  error
}

// abandoned reports a part nobody waits for any more.
func (p *part) abandoned() bool { return p.gone.Load() || p.ctx.Err() != nil }

var _ Client = (*Coalescer)(nil)

// NewCoalescer wraps c; call Close when done.
func NewCoalescer(c Client, cfg CoalesceConfig) *Coalescer {
	cfg = cfg.withDefaults()
	co := &Coalescer{client: c, cfg: cfg, freed: make(chan struct{}, 1),
		wake: make(chan struct{}, 1), done: make(chan struct{}), limit: cfg.MinInFlight}
	co.wg.Add(1)
	go co.run()
	return co
}

// Model is the wrapped client's.
func (co *Coalescer) Model() string { return co.client.Model() }

// Dimensions is the wrapped client's.
func (co *Coalescer) Dimensions() int { return co.client.Dimensions() }

// ReportedModel is the wrapped client's.
func (co *Coalescer) ReportedModel() string { return co.client.ReportedModel() }

// Embed is EmbedCounted without counts.
func (co *Coalescer) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return co.EmbedCounted(ctx, texts, nil)
}

// EmbedCounted queues texts (tokens[i] counting texts[i]; nil: counted
// here) and returns their vectors in order once the requests carrying them
// have returned. Errors are those of the wrapped client, ErrClosed after
// Close, or ctx's.
func (co *Coalescer) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	for i, t := range texts {
		if t == "" {
			return nil, &InputError{Index: i, Reason: "empty text (the API rejects empty inputs)"}
		}
	}
	tokens, err := counts(texts, tokens)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var parts []*part
	for _, b := range batches(tokens, co.cfg.MaxBatchInputs, co.cfg.MaxBatchTokens) {
		parts = append(parts, &part{ctx: ctx, texts: texts[b.start:b.end], tokens: tokens[b.start:b.end],
			sum: sum(tokens[b.start:b.end]), offset: b.start, at: now, res: make(chan partResult, 1)})
	}
	defer func() {
		for _, p := range parts {
			p.gone.Store(true)
		}
	}()
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return nil, ErrClosed
	}
	co.queue = append(co.queue, parts...)
	co.mu.Unlock()
	co.calls.Add(1)
	co.signal()
	signal(co.freed) // a full request may now take a slot beyond MinInFlight
	out := make([][]float32, len(texts))
	for _, p := range parts {
		select {
		case r := <-p.res:
			if r.err != nil {
				return nil, r.err
			}
			copy(out[p.offset:], r.vecs)
		case <-ctx.Done():
			return nil, fmt.Errorf("embed %d texts with %s: %w", len(texts), co.client.Model(), ctx.Err())
		}
	}
	return out, nil
}

func (co *Coalescer) signal() { signal(co.wake) }

// signal wakes whoever waits on c, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Close fails the calls still queued with ErrClosed and waits for the
// requests in flight. Calls after Close fail with ErrClosed.
func (co *Coalescer) Close() {
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return
	}
	co.closed = true
	queued := co.queue
	co.queue = nil
	co.mu.Unlock()
	close(co.done)
	for _, p := range queued {
		p.res <- partResult{err: ErrClosed}
	}
	co.wg.Wait()
}

// run takes a request slot, then the next request's parts, and sends them.
// Taking the slot first is what makes a backlog batch well: while every
// slot is busy, the queue grows, and the next request leaves full.
func (co *Coalescer) run() {
	defer co.wg.Done()
	for {
		if !co.acquire() {
			return
		}
		batch := co.next()
		if batch == nil {
			co.release()
			return
		}
		co.wg.Add(1)
		go func() {
			defer co.wg.Done()
			defer co.release()
			co.send(batch)
		}()
	}
}

// acquire waits until another request may go and counts it; false once
// closed. Up to MinInFlight requests may be in flight whatever they carry;
// beyond that, up to the limit the latency sets, only while the queue holds
// a full request: demand that the requests in flight cannot carry. Partial
// requests then keep waiting for a slot and fill meanwhile, as they would
// with a fixed MinInFlight, so a provider that answers fast, or a load the
// requests in flight carry, is batched as fully as before.
func (co *Coalescer) acquire() bool {
	for {
		co.mu.Lock()
		if co.busy < min(co.cfg.MinInFlight, co.limit) || (co.busy < co.limit && co.fullLocked()) {
			co.busy++
			co.mu.Unlock()
			return true
		}
		co.mu.Unlock()
		select {
		case <-co.freed:
		case <-co.done:
			return false
		}
	}
}

func (co *Coalescer) release() {
	co.mu.Lock()
	co.busy--
	co.mu.Unlock()
	signal(co.freed)
}

// observe folds an answered request's latency and tokens into the moving
// averages and sets the limit from them.
func (co *Coalescer) observe(latency time.Duration, tokens int) {
	const weight = 0.2 // of the newest answer
	co.mu.Lock()
	if co.latency == 0 {
		co.latency, co.tokensPerRequest = latency, float64(tokens)
	} else {
		co.latency = time.Duration((1-weight)*float64(co.latency) + weight*float64(latency))
		co.tokensPerRequest = (1-weight)*co.tokensPerRequest + weight*float64(tokens)
	}
	old := co.limit
	co.limit = InFlightLimit(co.cfg, co.latency, co.tokensPerRequest)
	raised := co.limit > old
	co.mu.Unlock()
	if raised {
		signal(co.freed)
	}
}

// InFlightLimit is how many requests a coalescer with cfg allows in flight
// while full requests wait, when the provider answers in latency (zero:
// not known yet) with requests of tokensPerRequest tokens: enough that a
// full request can leave every Linger while each takes latency (latency ÷
// Linger, Little's law), so that a backlog drains at up to MaxBatchInputs
// per Linger whatever the latency; at least MinInFlight; at most what the
// rate limits serve in latency, plus one waiting at the limiter; at most
// MaxInFlight. The rate of requests it allows, limit ÷ latency, is then at
// most one per Linger above MinInFlight's, so a slow provider is not sent
// more requests per second than a fast one.
func InFlightLimit(cfg CoalesceConfig, latency time.Duration, tokensPerRequest float64) int {
	cfg = cfg.withDefaults()
	n := cfg.MinInFlight
	if latency <= 0 {
		return n
	}
	n = max(n, int(math.Ceil(float64(latency)/float64(cfg.Linger))))
	if cfg.RequestsPerMinute > 0 {
		n = min(n, int(math.Ceil(float64(cfg.RequestsPerMinute)/60*latency.Seconds()))+1)
	}
	if cfg.TokensPerMinute > 0 && tokensPerRequest > 0 {
		n = min(n, int(math.Ceil(float64(cfg.TokensPerMinute)/60/tokensPerRequest*latency.Seconds()))+1)
	}
	return min(n, cfg.MaxInFlight)
}

// next waits until the queue holds a full request or its oldest part has
// lingered long enough, and takes that request's parts; nil once closed.
func (co *Coalescer) next() []*part {
	for {
		co.mu.Lock()
		co.queue = slices.DeleteFunc(co.queue, (*part).abandoned)
		wait := time.Duration(-1)
		if len(co.queue) > 0 {
			n, full := co.fits()
			wait = time.Until(co.queue[0].at.Add(co.cfg.Linger))
			if full || wait <= 0 {
				batch := slices.Clone(co.queue[:n])
				co.queue = slices.Delete(co.queue, 0, n)
				co.mu.Unlock()
				return batch
			}
		}
		co.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-co.wake:
		case <-fire:
		case <-co.done:
		}
		if timer != nil {
			timer.Stop()
		}
		select {
		case <-co.done:
			return nil
		default:
		}
	}
}

// fullLocked reports whether the queue holds a full request. Called with
// mu held.
func (co *Coalescer) fullLocked() bool {
	_, full := co.fits()
	return full
}

// fits returns how many queued parts, from the front, one request takes
// (at least one: a part fits alone by construction), and whether that
// request is full: the next part would not fit, or the inputs are at the
// limit. Called with mu held.
func (co *Coalescer) fits() (int, bool) {
	inputs, tokens := 0, 0
	for i, p := range co.queue {
		if i > 0 && (inputs+len(p.texts) > co.cfg.MaxBatchInputs || tokens+p.sum > co.cfg.MaxBatchTokens) {
			return i, true
		}
		inputs += len(p.texts)
		tokens += p.sum
	}
	return len(co.queue), inputs >= co.cfg.MaxBatchInputs
}

// lane is the highest lane among the parts' (the budget admits a shared
// request for its most urgent caller: a live change that shares a request
// with backfill texts does not wait in the backfill lane).
func (co *Coalescer) lane(batch []*part) Lane {
	best := LaneBackfill
	for _, p := range batch {
		best = min(best, laneOr(p.ctx, co.cfg.Lane))
	}
	return best
}

// send embeds the parts in one request and hands each its vectors or the
// error (see Coalescer on which errors are narrowed to their input). A text
// that several parts carry (a paragraph many documents share: a footer, a
// disclaimer) is sent once, and each part gets its own copy of its vector.
func (co *Coalescer) send(batch []*part) {
	var texts []string
	var tokens []int
	slot := make(map[string]int)
	where := make([][]int, len(batch)) // where[k][i]: texts index of batch[k].texts[i]
	carried := 0
	for k, p := range batch {
		where[k] = make([]int, len(p.texts))
		for i, t := range p.texts {
			u, ok := slot[t]
			if !ok {
				u = len(texts)
				slot[t] = u
				texts = append(texts, t)
				tokens = append(tokens, p.tokens[i])
			}
			where[k][i] = u
		}
		carried += len(p.texts)
	}
	// The request serves every caller in it, so no single caller's
	// cancellation ends it; it ends when all of them have gone. The first
	// caller's context still lends its values (trace ids).
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	ctx = WithLane(ctx, co.lane(batch))
	var live atomic.Int64
	live.Store(int64(len(batch)))
	for _, p := range batch {
		stop := context.AfterFunc(p.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	co.requests.Add(1)
	co.inputs.Add(int64(len(texts)))
	co.shared.Add(int64(carried - len(texts)))
	probe := &serviceTime{}
	start := time.Now()
	vecs, err := co.client.EmbedCounted(withServiceTime(ctx, probe), texts, tokens)
	if err == nil {
		// The provider's own time when the client reports it (without
		// waits at its rate limiter or between retries: counting those
		// would raise the limit while the provider pushes back), else the
		// whole call's.
		latency := probe.get()
		if latency == 0 {
			latency = time.Since(start)
		}
		co.observe(latency, sum(tokens))
	}
	if err == nil && len(vecs) != len(texts) {
		err = &ResponseError{Model: co.client.Model(), Reason: fmt.Sprintf("%d vectors for %s", len(vecs), inputs(len(texts)))}
	}
	if err == nil && co.cfg.Keep != nil {
		if kerr := co.cfg.Keep(ctx, texts, vecs); kerr != nil {
			co.keepFailures.Add(1)
		}
	}
	if err == nil {
		handed := make([]bool, len(texts))
		for k, p := range batch {
			out := make([][]float32, len(p.texts))
			for i, u := range where[k] {
				out[i] = vecs[u]
				if handed[u] {
					out[i] = slices.Clone(vecs[u]) // callers own their vectors
				}
				handed[u] = true
			}
			p.res <- partResult{vecs: out}
		}
		return
	}
	co.fail(batch, where, err)
}

// fail hands a failed request's error to its parts, narrowing permanent
// failures of one input to the parts that carry that text.
func (co *Coalescer) fail(batch []*part, where [][]int, err error) {
	var in *InputError
	switch {
	case errors.As(err, &in) && slices.ContainsFunc(where, func(w []int) bool { return slices.Contains(w, in.Index) }):
		var rest []*part
		for k, p := range batch {
			if i := slices.Index(where[k], in.Index); i >= 0 {
				p.res <- partResult{err: &InputError{Index: p.offset + i, Reason: in.Reason}}
			} else if !p.abandoned() {
				rest = append(rest, p)
			}
		}
		if len(rest) > 0 {
			co.send(rest)
		}
	case len(batch) > 1 && (inputRejected(err) || errors.As(err, new(*ResponseError))):
		// The API does not say which input it refused, or answered a
		// reply that does not match the request: each call's texts go
		// again alone, so only the culprit's call gets the error.
		for _, p := range batch {
			if !p.abandoned() {
				co.send([]*part{p})
			}
		}
	default:
		for _, p := range batch {
			p.res <- partResult{err: err}
		}
	}
}

// inputRejected reports a permanent API refusal that may be one input's
// fault: a 4xx other than bad credentials or an unknown model, which every
// request would get.
func inputRejected(err error) bool {
	var api *APIError
	if !errors.As(err, &api) || !api.Permanent() {
		return false
	}
	switch api.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return false
	}
	return true
}

// CoalesceStats are cumulative counters of a Coalescer.
type CoalesceStats struct {
	Calls    int64 // EmbedCounted calls that queued texts
	Requests int64 // requests sent to the wrapped client, resends included
	Inputs   int64 // texts those requests carried
	// Shared counts texts that did not need an input of their own: the
	// same text was already in the request for another call.
	Shared int64
	// KeepFailures counts answered requests whose Keep returned an error.
	KeepFailures int64
	// InFlight is the requests in flight now (the one being gathered
	// included: it takes its slot first), Limit how many are allowed while
	// full requests wait (see CoalesceConfig.MaxInFlight), Latency the
	// moving average of the provider's answers (zero: none yet).
	InFlight, Limit int
	Latency         time.Duration
}

// Stats returns a snapshot of the counters.
func (co *Coalescer) Stats() CoalesceStats {
	co.mu.Lock()
	busy, limit, latency := co.busy, co.limit, co.latency
	co.mu.Unlock()
	return CoalesceStats{Calls: co.calls.Load(), Requests: co.requests.Load(), Inputs: co.inputs.Load(), Shared: co.shared.Load(),
		KeepFailures: co.keepFailures.Load(), InFlight: busy, Limit: limit, Latency: latency}
}

// serviceTime is where a client reports how long the provider took to
// answer a call, without its waits at the rate limiter or between retries:
// the longest of the call's successful attempts.
type serviceTime struct{ ns atomic.Int64 }

type serviceTimeKey struct{}

func withServiceTime(ctx context.Context, s *serviceTime) context.Context {
	return context.WithValue(ctx, serviceTimeKey{}, s)
}

// reportServiceTime records d for the caller of ctx, if it asked.
func reportServiceTime(ctx context.Context, d time.Duration) {
	s, _ := ctx.Value(serviceTimeKey{}).(*serviceTime)
	if s == nil {
		return
	}
	for {
		old := s.ns.Load()
		if int64(d) <= old || s.ns.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (s *serviceTime) get() time.Duration { return time.Duration(s.ns.Load()) }
