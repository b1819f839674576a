package embedder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/internal/vector"
)

// OpenAI embeds texts through an OpenAI-compatible /embeddings endpoint. It
// splits a call into requests of at most MaxBatchInputs texts and
// MaxBatchTokens tokens, sends them one after another, retries transient
// failures and checks every vector's size. It is safe for concurrent use;
// Close releases idle connections.
type OpenAI struct {
	cfg       Config
	client    *openai.Client
	transport *http.Transport
	sendDims  bool
	// sleep waits between attempts; tests replace it to record the waits.
	sleep func(ctx context.Context, d time.Duration) error
	// budget admits every attempt (rate limits, the fleet's pause after a
	// 429, requests in flight), shared with the other processes using the
	// key when embedder.budget.redis_url is set.
	budget *budget
	stats  stats
	// reported is the model name of the last answer (monitor's
	// model_version): providers name dated snapshots there.
	reported atomic.Pointer[string]
	// floatOnly is set once an "auto" encoding found that the server does
	// not speak base64; b64Seen once a base64 answer decoded. While neither
	// is set, an "auto" request keeps its reply's bytes (see attempt).
	floatOnly atomic.Bool
	b64Seen   atomic.Bool
	// sized is set once the model answered with vectors of Dimensions: from
	// then on a lone vector of another size is that input's fault, not the
	// model's.
	sized atomic.Bool
	log   *slog.Logger
}

// Stats are cumulative counters of an OpenAI client, for metrics and tests.
type Stats struct {
	Requests  int64         // HTTP requests sent, retries included
	Retries   int64         // requests that were retries of a failed one
	Inputs    int64         // texts embedded successfully
	Tokens    int64         // prompt tokens the API reported as used
	Failures  int64         // Embed calls that returned an error
	RetryWait time.Duration // total time waited before retries
	LimitWait time.Duration // total time waited for the budget (rate limits, the pause after a 429, requests in flight)
	Truncated int64         // inputs cut to MaxInputTokens
	Splits    int64         // batches halved: rejected as too large, or answered with a reply that does not match them
}

type stats struct {
	requests, retries, inputs, tokens, failures, retryWait, limitWait, truncated, splits atomic.Int64
}

// NewOpenAI returns a client for cfg (Provider may be left empty) after
// applying defaults; the error lists every invalid field.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	if cfg.Provider == "" {
		cfg.Provider = ProviderOpenAI
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err)
	}
	if cfg.Provider != ProviderOpenAI {
		return nil, fmt.Errorf("embedder config: embedder.provider: NewOpenAI needs %q, got %q", ProviderOpenAI, cfg.Provider)
	}
	var cc openai.ClientConfig
	if cfg.APIType == APITypeAzure {
		cc = openai.DefaultAzureConfig(cfg.APIKey, cfg.BaseURL)
		cc.APIVersion = cfg.APIVersion
	} else {
		cc = openai.DefaultConfig(cfg.APIKey)
		cc.BaseURL = cfg.BaseURL
	}
	if cfg.TokensPerMinute > 0 {
		// Every request must fit the token bucket.
		cfg.MaxBatchTokens = min(cfg.MaxBatchTokens, TokenBurst(cfg.TokensPerMinute))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b, err := newBudget(cfg, logger)
	if err != nil {
		return nil, fmt.Errorf("embedder config: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Per-attempt timeouts come from the request context, so the client
	// itself has none; a client timeout would also cut Retry-After reads.
	cc.HTTPClient = headerDoer{c: &http.Client{Transport: tr}}
	return &OpenAI{
		cfg:       cfg,
		client:    openai.NewClientWithConfig(cc),
		transport: tr,
		sendDims:  cfg.SendsDimensions(),
		sleep:     sleepCtx,
		budget:    b,
		log:       logger,
	}, nil
}

// Model returns the configured model name.
func (o *OpenAI) Model() string { return o.cfg.Model }

// Dimensions returns the vector length every reply is checked against.
func (o *OpenAI) Dimensions() int { return o.cfg.Dimensions }

// ReportedModel returns the model name the API gave in its last successful
// answer, or "" before the first one.
func (o *OpenAI) ReportedModel() string {
	if m := o.reported.Load(); m != nil {
		return *m
	}
	return ""
}

// Close releases idle HTTP connections. The client stays usable.
func (o *OpenAI) Close() { o.transport.CloseIdleConnections() }

// Stats returns a snapshot of the counters.
func (o *OpenAI) Stats() Stats {
	return Stats{
		Requests:  o.stats.requests.Load(),
		Retries:   o.stats.retries.Load(),
		Inputs:    o.stats.inputs.Load(),
		Tokens:    o.stats.tokens.Load(),
		Failures:  o.stats.failures.Load(),
		RetryWait: time.Duration(o.stats.retryWait.Load()),
		LimitWait: time.Duration(o.stats.limitWait.Load()),
		Truncated: o.stats.truncated.Load(),
		Splits:    o.stats.splits.Load(),
	}
}

// Embed returns one vector per text in input order. Errors that retrying
// cannot fix (4xx, wrong dimensions, empty text) satisfy
// interface{ Permanent() bool } with Permanent() == true; a cancelled ctx
// returns an error that wraps ctx.Err().
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return o.EmbedCounted(ctx, texts, nil)
}

// EmbedCounted is Embed with the cl100k_base count of every text, which it
// trusts for batching, rate limits and max_input_tokens instead of counting
// again; nil tokens are counted here.
func (o *OpenAI) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	vecs, err := o.embed(ctx, texts, tokens)
	if err != nil {
		o.stats.failures.Add(1)
		return nil, fmt.Errorf("embed %d texts with %s: %w", len(texts), o.cfg.Model, err)
	}
	return vecs, nil
}

func (o *OpenAI) embed(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	for i, t := range texts {
		if t == "" {
			return nil, &InputError{Index: i, Reason: "empty text (the API rejects empty inputs)"}
		}
	}
	tokens, err := counts(texts, tokens)
	if err != nil {
		return nil, err
	}
	texts, tokens, err = o.fitInputs(texts, tokens)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for _, b := range batches(tokens, o.cfg.MaxBatchInputs, o.cfg.MaxBatchTokens) {
		vecs, err := o.embedSplitting(ctx, texts[b.start:b.end], tokens[b.start:b.end])
		if err != nil {
			if in, ok := shiftInput(err, b.start); ok {
				return nil, in
			}
			return nil, fmt.Errorf("batch %d..%d: %w", b.start, b.end-1, err)
		}
		copy(out[b.start:b.end], vecs)
	}
	return out, nil
}

// embedSplitting sends batch and, when the API rejects it as too large
// (our token count and the provider's differ, or its limits are lower than
// configured) or answers it with a reply that does not match it (a vector
// short or over, a bad index, a body over the cap), halves it and tries
// each half. A single input the API still rejects keeps the permanent
// error, and one it still answers badly fails with an InputError: either
// dead-letters its change and no other.
func (o *OpenAI) embedSplitting(ctx context.Context, batch []string, tokens []int) ([][]float32, error) {
	vecs, err := o.embedBatch(ctx, batch, sum(tokens))
	if err == nil {
		return vecs, nil
	}
	var bad *ResponseError
	if len(batch) < 2 {
		if errors.As(err, &bad) && ctx.Err() == nil {
			return nil, &InputError{Index: 0, Reason: fmt.Sprintf("sent alone (%d attempts), the embeddings API's reply for model %q did not match it: %s", max(o.cfg.MaxRetries, 0)+1, o.cfg.Model, bad.Reason)}
		}
		return nil, err
	}
	if !tooLarge(err) && !errors.As(err, &bad) {
		return nil, err
	}
	o.stats.splits.Add(1)
	half := len(batch) / 2
	left, err := o.embedSplitting(ctx, batch[:half], tokens[:half])
	if err != nil {
		return nil, err
	}
	right, err := o.embedSplitting(ctx, batch[half:], tokens[half:])
	if err != nil {
		if in, ok := shiftInput(err, half); ok {
			return nil, in
		}
		return nil, err
	}
	return append(left, right...), nil
}

// shiftInput returns err's InputError with its index moved by off (the
// failed slice's position in the call), and whether err carries one.
func shiftInput(err error, off int) (*InputError, bool) {
	var in *InputError
	if !errors.As(err, &in) {
		return nil, false
	}
	return &InputError{Index: in.Index + off, Reason: in.Reason}, true
}

// tooLarge reports a rejection of the request's size: 413, or a 400 whose
// message says the batch has too many tokens or inputs. (The status alone
// cannot tell a too-large batch from other bad requests, and bisecting
// every 400 would cost 2n requests for, say, a bad "dimensions".)
func tooLarge(err error) bool {
	var api *APIError
	if !errors.As(err, &api) {
		return false
	}
	if api.StatusCode == http.StatusRequestEntityTooLarge {
		return true
	}
	if api.StatusCode != http.StatusBadRequest {
		return false
	}
	m := strings.ToLower(api.Message)
	for _, s := range []string{"token", "too many", "too large", "maximum", "max ", "at most", "context length", "inputs"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// embedBatch sends one request, retrying transient failures with capped,
// jittered exponential backoff, or as long as the server asks.
func (o *OpenAI) embedBatch(ctx context.Context, batch []string, tokens int) ([][]float32, error) {
	waited := false // the last retry wait was the server's
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Every attempt, retries included, passes the budget: the rate
		// limits (the fleet's with a shared budget), the pause after a
		// provider's 429 and the bound on requests in flight.
		lane := laneOr(ctx, o.cfg.Lane)
		release, budgetWait, err := o.budget.admit(ctx, lane, tokens, waited)
		o.stats.limitWait.Add(int64(budgetWait))
		if err != nil {
			return nil, fmt.Errorf("wait for the embedder's budget: %w", err)
		}
		sent := time.Now()
		vecs, hdr, err := o.attempt(ctx, batch)
		release()
		o.providerSignals(ctx, lane, tokens, hdr, err)
		if err == nil {
			reportServiceTime(ctx, time.Since(sent))
			return vecs, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		var p interface{ Permanent() bool }
		if errors.As(err, &p) && p.Permanent() {
			return nil, err
		}
		var bad *ResponseError
		if len(batch) > 1 && errors.As(err, &bad) {
			// Halving finds the inputs that draw it sooner than resending
			// the same request (embedSplitting).
			return nil, err
		}
		if attempt >= o.cfg.MaxRetries {
			return nil, fmt.Errorf("%d attempts: %w", attempt+1, err)
		}
		wait, ok := serverWait(hdr, replyTime(hdr))
		if !ok {
			wait = backoff(attempt)
		}
		// A 429's wait is the pause it set (providerSignals): the retry
		// has served it and does not wait for it again.
		var api *APIError
		waited = ok && errors.As(err, &api) && api.StatusCode == http.StatusTooManyRequests
		o.stats.retries.Add(1)
		o.stats.retryWait.Add(int64(wait))
		if serr := o.sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", serr, err)
		}
	}
}

// attempt makes one request and checks the reply against the batch. It
// returns the response headers (nil if none arrived) for Retry-After.
func (o *OpenAI) attempt(ctx context.Context, batch []string) ([][]float32, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	info := &reqInfo{limit: o.cfg.responseCap(len(batch))}
	ctx = context.WithValue(ctx, reqKey{}, info)
	req := openai.EmbeddingRequestStrings{Input: batch, Model: openai.EmbeddingModel(o.cfg.Model)}
	if o.sendDims {
		req.Dimensions = o.cfg.Dimensions
	}
	b64 := o.cfg.EncodingFormat == EncodingBase64 || (o.cfg.EncodingFormat == EncodingAuto && !o.floatOnly.Load())
	if b64 {
		// go-openai decodes the reply into the same float32 vectors.
		req.EncodingFormat = openai.EmbeddingEncodingFormatBase64
	}
	learning := b64 && o.cfg.EncodingFormat == EncodingAuto && !o.b64Seen.Load()
	if learning {
		// Until the format is known, keep the reply: a server that ignores
		// encoding_format answers in JSON numbers, and those vectors are
		// as good as base64 ones. Decoding them instead of asking again
		// keeps every first request of a client (the start-up probe, each
		// shadow's, each backfill's, or the pipeline's first batch when the
		// probe failed) from being embedded twice.
		info.keep = new(bytes.Buffer)
	}
	o.stats.requests.Add(1)
	resp, err := o.client.CreateEmbeddings(ctx, req)
	if err != nil {
		err = o.classify(ctx, err)
		if b64 && noBase64(err) {
			if o.cfg.EncodingFormat == EncodingBase64 {
				return nil, info.hdr, &EncodingError{Model: o.cfg.Model, Err: err}
			}
			if o.floatOnly.CompareAndSwap(false, true) {
				// The URL may carry a password and the error may quote it.
				o.log.WarnContext(ctx, "embedding server does not answer in base64; asking for float from now on (set embedder.encoding_format: float to skip the probe)",
					"base_url", redact.String(o.cfg.BaseURL), "error", redact.String(err.Error()))
			}
			floats, ok := floatReply(info.keep)
			if !ok {
				// Refused (400/422): nothing was embedded; ask again in float.
				return o.attempt(ctx, batch)
			}
			resp, err = floats, nil
		} else {
			return nil, info.hdr, err
		}
	} else if learning {
		o.b64Seen.Store(true)
	}
	if len(resp.Data) != len(batch) {
		return nil, info.hdr, &ResponseError{Model: o.cfg.Model,
			Reason: fmt.Sprintf("%d vectors for %s", len(resp.Data), inputs(len(batch)))}
	}
	out := make([][]float32, len(batch))
	for _, d := range resp.Data {
		// Order by the index field, not by position: the API documents
		// index as the input's position and does not promise order.
		if d.Index < 0 || d.Index >= len(batch) || out[d.Index] != nil {
			return nil, info.hdr, &ResponseError{Model: o.cfg.Model,
				Reason: fmt.Sprintf("index %d out of range or repeated", d.Index)}
		}
		out[d.Index] = d.Embedding
	}
	if err := o.checkSizes(out); err != nil {
		return nil, info.hdr, err
	}
	o.stats.inputs.Add(int64(len(batch)))
	o.stats.tokens.Add(int64(resp.Usage.PromptTokens))
	if m := string(resp.Model); m != "" {
		o.reported.Store(&m)
	}
	return out, info.hdr, nil
}

// checkSizes tells a model of the wrong size from one bad vector. An
// answer whose vectors all have the same wrong size is the model's (a
// DimensionError: every request would get it), unless it is one vector
// of a model already seen answering at the right size. A vector whose
// size differs from its neighbours' is its input's fault: an InputError
// naming the first, so that only that input's document fails. A vector of
// the right size that cannot be searched (Unsearchable) is its input's
// fault the same way.
func (o *OpenAI) checkSizes(vecs [][]float32) error {
	want := o.cfg.Dimensions
	bad, uniform := -1, true
	for i, v := range vecs {
		if len(v) != want && bad < 0 {
			bad = i
		}
		uniform = uniform && len(v) == len(vecs[0])
	}
	if bad < 0 {
		o.sized.Store(true)
		for i, v := range vecs {
			if why := vector.Unsearchable(v); why != "" {
				return &InputError{Index: i, Reason: fmt.Sprintf("model %q returned for it %s", o.cfg.Model, why)}
			}
		}
		return nil
	}
	got := len(vecs[bad])
	if uniform && (len(vecs) > 1 || !o.sized.Load()) {
		return &DimensionError{Model: o.cfg.Model, Got: got, Want: want, Sent: o.sendDims}
	}
	return &InputError{Index: bad, Reason: fmt.Sprintf("model %q returned a %d-dimension vector for it, where its other vectors have %d", o.cfg.Model, got, want)}
}

// noBase64 reports a reply showing that the server does not speak
// encoding_format base64: vectors came back as JSON numbers, or the request
// was refused over that parameter.
func noBase64(err error) bool {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return true
	}
	var api *APIError
	return errors.As(err, &api) && (api.StatusCode == http.StatusBadRequest || api.StatusCode == http.StatusUnprocessableEntity) &&
		strings.Contains(strings.ToLower(api.Message), "encoding_format")
}

// floatReply decodes a kept reply that answered a base64 request with JSON
// numbers; ok is false when there is none or it does not decode.
func floatReply(kept *bytes.Buffer) (openai.EmbeddingResponse, bool) {
	var resp openai.EmbeddingResponse
	if kept == nil || kept.Len() == 0 {
		return resp, false
	}
	if err := json.Unmarshal(kept.Bytes(), &resp); err != nil || len(resp.Data) == 0 {
		return resp, false
	}
	return resp, true
}

// classify turns go-openai's errors into ours; transport errors (resets,
// refused connections, attempt timeouts) pass through and are retried.
func (o *OpenAI) classify(ctx context.Context, err error) error {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0 {
		return &APIError{StatusCode: apiErr.HTTPStatusCode, Model: o.cfg.Model, Message: apiErr.Message}
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0 {
		body := string(reqErr.Body)
		if len(body) > 200 {
			body = body[:200] + "…"
		}
		return &APIError{StatusCode: reqErr.HTTPStatusCode, Model: o.cfg.Model, Message: strings.TrimSpace(body)}
	}
	var big *bodyTooLarge
	if errors.As(err, &big) {
		return &ResponseError{Model: o.cfg.Model, Reason: fmt.Sprintf("body over %d bytes, refused unread past that (embedder.max_response_bytes)", big.limit)}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("request timed out after %s (embedder.timeout): %w", o.cfg.Timeout, err)
	}
	return err
}

// reqKey carries a *reqInfo through the request context: headerDoer hands
// the response headers back (go-openai's errors drop them, and 429s need
// Retry-After) and caps the body at limit bytes.
type reqKey struct{}

type reqInfo struct {
	hdr   http.Header
	limit int64
	// keep, when not nil, receives the body as it is read (at most limit
	// bytes).
	keep *bytes.Buffer
}

type headerDoer struct{ c *http.Client }

func (d headerDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	if resp != nil {
		if p, ok := req.Context().Value(reqKey{}).(*reqInfo); ok {
			p.hdr = resp.Header
			if p.limit > 0 {
				resp.Body = newCappedBody(resp.Body, resp.ContentLength, p.limit)
			}
			if p.keep != nil {
				resp.Body = &keptBody{rc: resp.Body, keep: p.keep}
			}
		}
	}
	return resp, err
}

// bodyTooLarge is the read error of a response body over its cap.
type bodyTooLarge struct{ limit int64 }

func (e *bodyTooLarge) Error() string {
	return fmt.Sprintf("response body over %d bytes", e.limit)
}

// cappedBody reads at most limit bytes of a body and then fails with
// bodyTooLarge, without reading further (like http.MaxBytesReader, for a
// client). Closing it closes the connection under it, so the rest of an
// oversized body is never read.
type cappedBody struct {
	rc    io.ReadCloser
	left  int64
	limit int64
	err   error
}

func newCappedBody(rc io.ReadCloser, length, limit int64) *cappedBody {
	c := &cappedBody{rc: rc, left: limit, limit: limit}
	if length > limit {
		c.err = &bodyTooLarge{limit: limit} // announced too large: read none of it
	}
	return c
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.rc.Read(p)
	if int64(n) <= c.left {
		c.left -= int64(n)
		return n, err
	}
	n, c.left = int(c.left), 0
	c.err = &bodyTooLarge{limit: c.limit}
	return n, c.err
}

func (c *cappedBody) Close() error { return c.rc.Close() }

// keptBody copies what is read of a body into keep; Close reads the rest
// into it first (a JSON decoder may stop early), within the cap under it.
type keptBody struct {
	rc   io.ReadCloser
	keep *bytes.Buffer
}

func (k *keptBody) Read(p []byte) (int, error) {
	n, err := k.rc.Read(p)
	k.keep.Write(p[:n])
	return n, err
}

func (k *keptBody) Close() error {
	_, _ = io.Copy(k.keep, k.rc)
	return k.rc.Close()
}
