package embedder

import (
	"context"
	"errors"
	"fmt"
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
	// are busy, texts queue and leave together when one returns. Defaults
	// to 4.
	MaxInFlight int
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
}

func (c CoalesceConfig) withDefaults() CoalesceConfig {
	if c.Linger <= 0 {
		c.Linger = 20 * time.Millisecond
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4
	}
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
// once the oldest text has waited Linger, with at most MaxInFlight in
// flight. One call per document then costs a fraction of a request, where
// it cost at least one (a load once sent 2,000 requests for 9,387 inputs).
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
	slots  chan struct{} // one per request in flight
	wake   chan struct{} // the queue changed
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	queue  []*part
	closed bool

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
	co := &Coalescer{client: c, cfg: cfg, slots: make(chan struct{}, cfg.MaxInFlight),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
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

func (co *Coalescer) signal() {
	select {
	case co.wake <- struct{}{}:
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
		select {
		case co.slots <- struct{}{}:
		case <-co.done:
			return
		}
		batch := co.next()
		if batch == nil {
			<-co.slots
			return
		}
		co.wg.Add(1)
		go func() {
			defer co.wg.Done()
			defer func() { <-co.slots }()
			co.send(batch)
		}()
	}
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
	vecs, err := co.client.EmbedCounted(ctx, texts, tokens)
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
}

// Stats returns a snapshot of the counters.
func (co *Coalescer) Stats() CoalesceStats {
	return CoalesceStats{Calls: co.calls.Load(), Requests: co.requests.Load(), Inputs: co.inputs.Load(), Shared: co.shared.Load(), KeepFailures: co.keepFailures.Load()}
}
