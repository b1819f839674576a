package embedder_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestMain fails the run if a goroutine outlives the tests: the coalescer's
// dispatcher and senders must end with Close. Nothing is ignored: each test's
// fake API closes its connections when the test ends, so the HTTP
// transport's readers end too.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// coalesced starts a fake API whose every request takes delay and a
// coalescer over a client for it, without retries unless edit says so.
func coalesced(t *testing.T, delay time.Duration, cc embedder.CoalesceConfig, edit func(*embedder.Config)) (*embedder.Coalescer, *testBundle) {
	t.Helper()
	c, b := setup(t, openaitest.Options{}, false, func(cfg *embedder.Config) {
		cfg.MaxRetries = -1
		if edit != nil {
			edit(cfg)
		}
	})
	if delay > 0 {
		b.srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: delay} })
	}
	co := embedder.NewCoalescer(c, cc)
	t.Cleanup(co.Close)
	return co, b
}

// docTexts are the texts of document d: n paragraphs of its own.
func docTexts(d, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("document %d paragraph %d about tide pools and sourdough", d, i)
	}
	return out
}

type callResult struct {
	doc  int
	vecs [][]float32
	err  error
}

// callAll embeds the texts of docs concurrently, one call per document.
func callAll(ctx context.Context, co *embedder.Coalescer, docs [][]string) []callResult {
	out := make([]callResult, len(docs))
	var wg sync.WaitGroup
	for d, texts := range docs {
		wg.Go(func() {
			vecs, err := co.Embed(ctx, texts)
			out[d] = callResult{doc: d, vecs: vecs, err: err}
		})
	}
	wg.Wait()
	return out
}

// requireOwnVectors checks a call got the vectors of its own texts: the
// fake API answers with the Hashing embedder's vectors.
func requireOwnVectors(t *testing.T, texts []string, got [][]float32) {
	t.Helper()
	want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// hold makes the fake API keep every request until release is closed.
func hold(b *testBundle) chan struct{} {
	release := make(chan struct{})
	b.srv.SetHook(func(openaitest.Request) *openaitest.Fault {
		<-release
		return nil
	})
	return release
}

// callAllHeld is callAll with the API held until every call has queued, so
// a backlog forms however slowly this machine schedules the callers.
func callAllHeld(t *testing.T, co *embedder.Coalescer, release chan struct{}, docs [][]string) []callResult {
	return callAllHeldAfter(t, co, release, docs, 0)
}

// callAllHeldAfter is callAllHeld when earlier calls are still waiting.
func callAllHeldAfter(t *testing.T, co *embedder.Coalescer, release chan struct{}, docs [][]string, earlier int64) []callResult {
	t.Helper()
	done := make(chan []callResult)
	go func() { done <- callAll(t.Context(), co, docs) }()
	require.Eventually(t, func() bool { return co.Stats().Calls == earlier+int64(len(docs)) }, 10*time.Second, time.Millisecond)
	close(release)
	return <-done
}

func TestCoalescerSharesRequestsOnABacklog(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 2, MaxBatchInputs: 64}, nil)
	var docs [][]string
	for d := range 100 {
		docs = append(docs, docTexts(d, 4))
	}
	for _, r := range callAllHeld(t, co, hold(b), docs) {
		require.NoError(t, r.err)
		requireOwnVectors(t, docs[r.doc], r.vecs)
	}
	// 400 inputs; one request per document would be 100.
	sizes := b.srv.BatchSizes()
	require.LessOrEqual(t, len(sizes), 400/32, "requests: %v", sizes)
	require.Equal(t, 400, sum(sizes))
	for _, n := range sizes {
		require.LessOrEqual(t, n, 64)
	}
	st := co.Stats()
	require.Equal(t, int64(100), st.Calls)
	require.Equal(t, int64(len(sizes)), st.Requests)
}

func TestCoalescerSplitsCallsOverTheBatchLimits(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxBatchInputs: 5, MaxBatchTokens: 1000}, nil)
	texts := docTexts(1, 12)
	tokens := slices.Repeat([]int{100}, 12)
	vecs, err := co.EmbedCounted(t.Context(), texts, tokens)
	require.NoError(t, err)
	requireOwnVectors(t, texts, vecs)
	sizes := b.srv.BatchSizes() // requests in flight answer in any order
	slices.Sort(sizes)
	require.Equal(t, []int{2, 5, 5}, sizes)
}

// A request that fails after its retries fails only the calls whose texts
// it carried.
func TestCoalescerFailureReachesOnlyItsCalls(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxBatchInputs: 4, MaxInFlight: 4}, nil)
	var mu sync.Mutex
	var failed [][]string
	b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		for _, in := range r.Input {
			if strings.HasPrefix(in, "document 3 ") {
				mu.Lock()
				failed = append(failed, r.Input)
				mu.Unlock()
				return &openaitest.Fault{Status: http.StatusServiceUnavailable, Delay: 20 * time.Millisecond}
			}
		}
		return &openaitest.Fault{Delay: 20 * time.Millisecond}
	})
	var docs [][]string
	for d := range 12 {
		docs = append(docs, docTexts(d, 2))
	}
	results := callAll(t.Context(), co, docs)
	inFailed := func(d int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, in := range failed {
			if slices.Contains(in, docs[d][0]) {
				return true
			}
		}
		return false
	}
	errs := 0
	for _, r := range results {
		if r.err == nil {
			requireOwnVectors(t, docs[r.doc], r.vecs)
			continue
		}
		errs++
		var api *embedder.APIError
		require.True(t, errors.As(r.err, &api), "%v", r.err)
		require.Equal(t, http.StatusServiceUnavailable, api.StatusCode)
		require.True(t, inFailed(r.doc), "document %d failed but was not in the failed request", r.doc)
	}
	require.Error(t, results[3].err)
	require.LessOrEqual(t, errs, 2, "a request holds at most two documents' texts")
}

// A 429 is retried inside the request; every call gets its vectors.
func TestCoalescerRetries429(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{}, func(cfg *embedder.Config) { cfg.MaxRetries = 3 })
	b.srv.FailNext(1, openaitest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"})
	var docs [][]string
	for d := range 5 {
		docs = append(docs, docTexts(d, 3))
	}
	for _, r := range callAll(t.Context(), co, docs) {
		require.NoError(t, r.err)
		requireOwnVectors(t, docs[r.doc], r.vecs)
	}
	require.Equal(t, []time.Duration{time.Second}, b.Waits(), "Retry-After honoured")
}

// A permanent refusal of one input dead-letters only its document: the
// other calls' texts go again without it.
func TestCoalescerNarrowsPermanentErrorsToTheCulprit(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 1}, nil)
	release := make(chan struct{})
	b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		if slices.Contains(r.Input, "gate") {
			<-release // the three calls below queue behind it and leave together
		}
		for _, in := range r.Input {
			if strings.Contains(in, "forbidden") {
				return &openaitest.Fault{Status: http.StatusBadRequest}
			}
		}
		return nil
	})
	gate := make(chan error)
	go func() { _, err := co.Embed(t.Context(), []string{"gate"}); gate <- err }()
	require.Eventually(t, func() bool { return b.srv.Requests.Load() == 1 }, 10*time.Second, time.Millisecond)
	docs := [][]string{docTexts(0, 2), {"ok text", "forbidden text"}, docTexts(2, 3)}
	results := callAllHeldAfter(t, co, release, docs, 1)
	require.NoError(t, <-gate)
	require.NoError(t, results[0].err)
	requireOwnVectors(t, docs[0], results[0].vecs)
	require.NoError(t, results[2].err)
	requireOwnVectors(t, docs[2], results[2].vecs)
	var api *embedder.APIError
	require.True(t, errors.As(results[1].err, &api), "%v", results[1].err)
	require.True(t, api.Permanent())
	require.Equal(t, int64(5), co.Stats().Requests, "the gate, one shared request, then each call's texts alone")

	// An empty text is refused before it joins anyone's request.
	_, err := co.Embed(t.Context(), []string{"fine", ""})
	var in *embedder.InputError
	require.True(t, errors.As(err, &in))
	require.Equal(t, 1, in.Index)
}

// A caller whose ctx ends returns at once; the request it shared still
// serves the others, and a queued text whose caller left is never sent.
func TestCoalescerCancellation(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, time.Second, embedder.CoalesceConfig{MaxInFlight: 1, Linger: 10 * time.Millisecond}, nil)
	ctxA, cancelA := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var errA, errB error
	var vecsB [][]float32
	wg.Go(func() { _, errA = co.Embed(ctxA, []string{"caller A"}) })
	wg.Go(func() { vecsB, errB = co.Embed(t.Context(), []string{"caller B"}) })
	// A and B in flight, together or one queued behind the other.
	require.Eventually(t, func() bool { return co.Stats().Calls == 2 && b.srv.Requests.Load() >= 1 }, 10*time.Second, time.Millisecond)
	ctxC, cancelC := context.WithCancel(t.Context())
	var errC error
	wg.Go(func() { _, errC = co.Embed(ctxC, []string{"caller C"}) }) // queued: the only slot is busy
	require.Eventually(t, func() bool { return co.Stats().Calls == 3 }, 10*time.Second, time.Millisecond)
	start := time.Now()
	cancelA()
	cancelC()
	wg.Wait()
	require.ErrorIs(t, errA, context.Canceled)
	require.ErrorIs(t, errC, context.Canceled)
	require.NoError(t, errB)
	requireOwnVectors(t, []string{"caller B"}, vecsB)
	require.Less(t, time.Since(start), 5*time.Second)
	for _, r := range b.srv.Served() {
		require.NotContains(t, r.Input, "caller C", "a cancelled queued call is not sent")
	}
}

func TestCoalescerClose(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 300*time.Millisecond, embedder.CoalesceConfig{MaxInFlight: 1}, nil)
	var wg sync.WaitGroup
	var first, queued error
	wg.Go(func() { _, first = co.Embed(t.Context(), []string{"in flight"}) })
	require.Eventually(t, func() bool { return b.srv.Requests.Load() == 1 }, 10*time.Second, time.Millisecond)
	wg.Go(func() { _, queued = co.Embed(t.Context(), []string{"queued"}) })
	require.Eventually(t, func() bool { return co.Stats().Calls == 2 }, 10*time.Second, time.Millisecond)
	co.Close()
	wg.Wait()
	require.NoError(t, first, "a request in flight completes")
	require.ErrorIs(t, queued, embedder.ErrClosed)
	_, err := co.Embed(t.Context(), []string{"late"})
	require.ErrorIs(t, err, embedder.ErrClosed)
}

func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

// A paragraph several documents in flight share is sent once per request,
// and each call still gets its own vector of it, in its own slice.
func TestCoalescerSendsASharedTextOnce(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 1}, nil)
	const footer = "Subscribe to our newsletter for more articles like this one."
	var docs [][]string
	for d := range 6 {
		docs = append(docs, append(docTexts(d, 2), footer))
	}
	results := callAllHeld(t, co, hold(b), docs)
	for _, r := range results {
		require.NoError(t, r.err)
		requireOwnVectors(t, docs[r.doc], r.vecs)
	}
	sent := 0
	for _, req := range b.srv.Served() {
		for _, in := range req.Input {
			if in == footer {
				sent++
			}
		}
	}
	require.Equal(t, len(b.srv.Served()), sent, "the footer once per request: %v", b.srv.BatchSizes())
	st := co.Stats()
	require.Equal(t, int64(6*3), st.Inputs+st.Shared)
	require.Equal(t, int64(6-sent), st.Shared)
	results[0].vecs[2][0] = 42 // a caller changing its vector changes no one else's
	for _, r := range results[1:] {
		require.NotEqual(t, float32(42), r.vecs[2][0])
	}
}

// An input the API refuses fails every call that carries that text, and
// only those.
func TestCoalescerSharedCulpritFailsEveryCarrier(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 1}, func(c *embedder.Config) {
		c.MaxInputTokens = 5
		c.OnTooLong = embedder.TooLongDeadLetter
	})
	long := "this shared paragraph is far longer than five tokens allow"
	docs := [][]string{{"short one", long}, {"short two"}, {long, "short three"}}
	results := callAllHeld(t, co, hold(b), docs)
	require.NoError(t, results[1].err)
	requireOwnVectors(t, docs[1], results[1].vecs)
	for _, d := range []int{0, 2} {
		var in *embedder.InputError
		require.ErrorAs(t, results[d].err, &in, "doc %d", d)
		require.Equal(t, slices.Index(docs[d], long), in.Index, "doc %d: the index within its own call", d)
	}
}

// badIndexClient refuses every request with an InputError whose index is
// outside the request, as a buggy server or proxy might report.
type badIndexClient struct{ calls atomic.Int32 }

func (c *badIndexClient) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return c.EmbedCounted(ctx, texts, nil)
}

func (c *badIndexClient) EmbedCounted(_ context.Context, texts []string, _ []int) ([][]float32, error) {
	c.calls.Add(1)
	return nil, &embedder.InputError{Index: len(texts) + 5, Reason: "refused"}
}
func (c *badIndexClient) Model() string         { return "bad-index" }
func (c *badIndexClient) Dimensions() int       { return dims }
func (c *badIndexClient) ReportedModel() string { return "" }

// An InputError that names no input of the request reaches every call in
// it, once: it must not send the same request again and again.
func TestCoalescerInputErrorOutsideTheRequest(t *testing.T) {
	t.Parallel()
	c := &badIndexClient{}
	co := embedder.NewCoalescer(c, embedder.CoalesceConfig{Linger: 50 * time.Millisecond})
	t.Cleanup(co.Close)
	results := callAll(t.Context(), co, [][]string{{"one"}, {"two", "three"}})
	for _, r := range results {
		var in *embedder.InputError
		require.ErrorAs(t, r.err, &in, "doc %d", r.doc)
	}
	require.LessOrEqual(t, c.calls.Load(), int32(2), "one request, or two if the calls did not meet")
}

// TestCoalescerKeepsAnswersBeforeFreeingTheSlot pins what a crash can cost
// when every answer is kept (CoalesceConfig.Keep): the answer reaches Keep
// before any caller, and the request's slot stays taken until Keep has
// returned, so answers that are neither kept nor in flight cannot pile up
// however slowly the callers go on. A Keep that fails is counted and does
// not fail the callers.
func TestCoalescerKeepsAnswersBeforeFreeingTheSlot(t *testing.T) {
	t.Parallel()
	keepIn := make(chan []string, 8)
	release := make(chan struct{})
	var fail atomic.Bool
	var kept sync.Map
	keep := func(_ context.Context, texts []string, vecs [][]float32) error {
		keepIn <- texts
		<-release
		for i, t := range texts {
			kept.Store(t, vecs[i])
		}
		if fail.Load() {
			return errors.New("cache unavailable")
		}
		return nil
	}
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 1, MaxBatchInputs: 4, Linger: time.Millisecond, Keep: keep}, nil)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // runs before the coalescer's Close, which waits for Keep

	first, second := docTexts(1, 4), docTexts(2, 4)
	got := make(chan callResult, 2)
	go func() { v, err := co.Embed(t.Context(), first); got <- callResult{doc: 1, vecs: v, err: err} }()
	require.Equal(t, first, <-keepIn, "the answer goes to Keep")
	go func() { v, err := co.Embed(t.Context(), second); got <- callResult{doc: 2, vecs: v, err: err} }()
	require.Eventually(t, func() bool { return co.Stats().Calls == 2 }, 10*time.Second, time.Millisecond)
	// While Keep holds the only slot, no caller has its vectors and no
	// second request has gone out.
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, got, "no caller is answered before its answer is kept")
	require.Equal(t, []int{4}, b.srv.BatchSizes(), "the slot is not freed while Keep runs")

	fail.Store(true)
	free()
	for range 2 {
		r := <-got
		require.NoError(t, r.err, "a failed Keep does not fail the callers")
		texts := map[int][]string{1: first, 2: second}[r.doc]
		requireOwnVectors(t, texts, r.vecs)
		for i, text := range texts {
			v, ok := kept.Load(text)
			require.True(t, ok, "every answered text was kept")
			require.Equal(t, r.vecs[i], v)
		}
	}
	require.Equal(t, int64(2), co.Stats().KeepFailures)
}
