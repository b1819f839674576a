package embedder_test

import (
	"bytes"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

const culprit = "the paragraph the provider answers badly"

// faults are the ways a provider misbehaves for one input: they hit every
// request that carries the culprit text, at its position.
// aloneOK: the fault cannot hit a request of one input (a padded answer
// needs another entry to repeat), so narrowing ends with every input
// embedded.
var faults = []struct {
	name    string
	fault   func(pos int) openaitest.Fault
	aloneOK bool
}{
	{"wrong length for one input", func(pos int) openaitest.Fault { return openaitest.Fault{Lengths: map[int]int{pos: dims + 1}} }, false},
	{"zero vector for one input", func(pos int) openaitest.Fault { return openaitest.Fault{Fill: map[int]float32{pos: 0}} }, false},
	{"NaN vector for one input", func(pos int) openaitest.Fault {
		return openaitest.Fault{Fill: map[int]float32{pos: float32(math.NaN())}}
	}, false},
	{"Inf vector for one input", func(pos int) openaitest.Fault {
		return openaitest.Fault{Fill: map[int]float32{pos: float32(math.Inf(1))}}
	}, false},
	{"short answer", func(int) openaitest.Fault { return openaitest.Fault{Short: 1} }, false},
	{"long answer", func(int) openaitest.Fault { return openaitest.Fault{Long: 1} }, false},
	{"padded answer", func(int) openaitest.Fault { return openaitest.Fault{Padded: 1} }, true},
	{"oversized body", func(int) openaitest.Fault { return openaitest.Fault{BodyBytes: 200 << 20} }, false},
}

// culpritHook applies fault to every request carrying the culprit.
func culpritHook(fault func(pos int) openaitest.Fault) func(openaitest.Request) *openaitest.Fault {
	return func(r openaitest.Request) *openaitest.Fault {
		if i := slices.Index(r.Input, culprit); i >= 0 {
			f := fault(i)
			return &f
		}
		return nil
	}
}

// The client alone: the call fails with an InputError naming the culprit's
// position, after narrowing, in a bounded number of requests.
func TestOpenAIMisbehavingProviderNamesTheInput(t *testing.T) {
	t.Parallel()
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries = 1 })
			// Answered well first: the model's size is known.
			_, err := c.Embed(t.Context(), someTexts(1))
			require.NoError(t, err)
			b.srv.SetHook(culpritHook(tc.fault))
			texts := someTexts(8)
			texts[5] = culprit
			got, err := c.Embed(t.Context(), texts)
			if tc.aloneOK {
				require.NoError(t, err)
				requireOwnVectors(t, texts, got)
				require.Positive(t, c.Stats().Splits, "the padded answer was narrowed")
				return
			}
			var in *embedder.InputError
			require.ErrorAs(t, err, &in, "%v", err)
			require.Equal(t, 5, in.Index)
			requirePermanent(t, err, true)
			t.Logf("%s: %v (%d requests)", tc.name, err, b.srv.Requests.Load())
			// 1 + halving 8 → 4 → 2 → 1, with one retry alone: ≤ 8.
			require.LessOrEqual(t, b.srv.Requests.Load(), int64(8))
		})
	}
}

// The culprit's index survives both kinds of cut: into requests of
// embedder.max_batch_inputs, then halves of a failed request.
func TestOpenAIInputErrorIndexAcrossBatches(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries, c.MaxBatchInputs = -1, 4 })
	b.srv.SetHook(culpritHook(func(int) openaitest.Fault { return openaitest.Fault{Short: 1} }))
	texts := someTexts(11)
	texts[10] = culprit
	_, err := c.Embed(t.Context(), texts)
	var in *embedder.InputError
	require.ErrorAs(t, err, &in)
	require.Equal(t, 10, in.Index, "%v", err)
}

// The coalescer over the client: documents sharing requests with the
// culprit's get their vectors, only the culprit's call fails, with an
// InputError, and nothing waits for ever.
func TestCoalescerMisbehavingProviderCostsOnlyTheTouchedCall(t *testing.T) {
	t.Parallel()
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 1}, func(c *embedder.Config) { c.MaxRetries = 1 })
			// The first request confirms the model's size; then the
			// documents below queue behind a held request and share one.
			release := make(chan struct{})
			b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
				if slices.Contains(r.Input, "gate") {
					<-release
				}
				return culpritHook(tc.fault)(r)
			})
			gate := make(chan error)
			go func() { _, err := co.Embed(t.Context(), []string{"gate"}); gate <- err }()
			require.Eventually(t, func() bool { return b.srv.Requests.Load() == 1 }, 10*time.Second, time.Millisecond)
			docs := [][]string{docTexts(0, 3), {"a good paragraph", culprit, "another good one"}, docTexts(2, 2), docTexts(3, 4)}
			results := callAllHeldAfter(t, co, release, docs, 1)
			require.NoError(t, <-gate)
			for d, r := range results {
				if d == 1 && !tc.aloneOK {
					var in *embedder.InputError
					require.ErrorAs(t, r.err, &in, "%v", r.err)
					require.Equal(t, 1, in.Index, "the culprit's position in its own call")
					requirePermanent(t, r.err, true)
					continue
				}
				require.NoError(t, r.err, "doc %d", d)
				requireOwnVectors(t, docs[d], r.vecs)
			}
			require.LessOrEqual(t, co.Stats().Requests, int64(8))
		})
	}
}

// A slow answer for one document's request holds only that request: the
// others are answered while it waits.
func TestCoalescerSlowAnswerHoldsOnlyItsRequest(t *testing.T) {
	t.Parallel()
	co, b := coalesced(t, 0, embedder.CoalesceConfig{MaxInFlight: 2, Linger: time.Millisecond}, nil)
	release := make(chan struct{})
	b.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		if slices.Contains(r.Input, culprit) {
			<-release
		}
		return nil
	})
	slow := make(chan error)
	go func() { _, err := co.Embed(t.Context(), []string{culprit}); slow <- err }()
	require.Eventually(t, func() bool { return b.srv.Requests.Load() == 1 }, 10*time.Second, time.Millisecond)
	docs := [][]string{docTexts(0, 3), docTexts(1, 2), docTexts(2, 4)}
	for d, r := range callAll(t.Context(), co, docs) {
		require.NoError(t, r.err)
		requireOwnVectors(t, docs[d], r.vecs)
	}
	close(release)
	require.NoError(t, <-slow)
}

// An oversized body is refused after the cap, without reading the rest:
// the server could write only what the connection buffers took.
func TestOpenAIOversizedBodyIsRefusedUnread(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries = -1 })
	b.srv.FailNext(1, openaitest.Fault{BodyBytes: 200 << 20})
	_, err := c.Embed(t.Context(), someTexts(1))
	var in *embedder.InputError
	require.ErrorAs(t, err, &in)
	require.ErrorContains(t, err, "body over 19712 bytes, refused unread past that (embedder.max_response_bytes)")
	t.Logf("oversized body: %v; server wrote %d bytes of 200 MiB", err, b.srv.BodyWritten.Load())
	require.Positive(t, b.srv.BodyWritten.Load())
	require.Less(t, b.srv.BodyWritten.Load(), int64(32<<20), "the client stopped reading at the cap")

	// The setting replaces the default cap: an honest answer over it is
	// refused too.
	small, sb := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries, c.MaxResponseBytes = -1, 64 })
	_, err = small.Embed(t.Context(), someTexts(2))
	require.ErrorContains(t, err, "body over 64 bytes")
	require.Equal(t, int64(2), sb.srv.Requests.Load(), "two inputs, then the first alone, which fails the call")
}

// The encoding fallback's warning goes to the configured logger, with the
// password of embedder.base_url masked.
func TestOpenAIEncodingFallbackWarningIsRedacted(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Options{NoBase64: "ignore"})
	var buf syncBuffer
	base := strings.Replace(srv.URL, "http://", "http://ragsync:s3cret-pass@", 1)
	c, err := embedder.NewOpenAI(embedder.Config{BaseURL: base, Model: "text-embedding-3-small", Dimensions: dims,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Embed(t.Context(), someTexts(2))
	require.NoError(t, err)
	out := buf.String()
	t.Log(out)
	require.Contains(t, out, "embedding server does not answer in base64")
	require.Contains(t, out, "ragsync:xxxxx@127.0.0.1")
	require.NotContains(t, out, "s3cret-pass")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
