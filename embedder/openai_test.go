package embedder_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/embedder/embeddertest"
	"github.com/ragsync/ragsync/internal/openaitest"
)

const dims = 24

type testBundle struct {
	srv   *openaitest.Server
	mu    sync.Mutex
	waits []time.Duration // waits the client chose between attempts
}

func (b *testBundle) Waits() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.waits...)
}

// setup starts a fake API and a client for it; edit adjusts the client
// config. Waits are recorded, not slept, unless realSleep.
func setup(t *testing.T, opts openaitest.Options, realSleep bool, edit func(*embedder.Config)) (*embedder.OpenAI, *testBundle) {
	t.Helper()
	b := &testBundle{srv: openaitest.New(t, opts)}
	cfg := embedder.Config{Provider: "openai", BaseURL: b.srv.URL, Model: "text-embedding-3-small", Dimensions: dims,
		APIKey: "sk-test", Timeout: 5 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	c, err := embedder.NewOpenAI(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	if !realSleep {
		embedder.SetSleep(c, func(ctx context.Context, d time.Duration) error {
			b.mu.Lock()
			b.waits = append(b.waits, d)
			b.mu.Unlock()
			return ctx.Err()
		})
	}
	return c, b
}

func someTexts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("text number %d about change data capture", i)
	}
	return out
}

func TestOpenAIContract(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Options{})
	embeddertest.Run(t, func() embedder.Client {
		c, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, Model: "text-embedding-3-small",
			Dimensions: dims, MaxBatchInputs: 5})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	})
}

func TestOpenAIMatchesServerVectors(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, nil)
	texts := someTexts(3)
	got, err := c.Embed(t.Context(), texts)
	require.NoError(t, err)
	want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, dims, b.srv.Served()[0].Dimensions, "dimensions is sent to text-embedding-3 models")
	st := c.Stats()
	require.Equal(t, embedder.Stats{Requests: 1, Inputs: 3, Tokens: b.srv.Tokens.Load()}, st)
	require.Positive(t, st.Tokens)
}

// embedder.send_dimensions decides whether requests carry "dimensions":
// auto only for text-embedding-3 models.
func TestOpenAISendDimensions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting, model string
		want           int
	}{
		{"", "text-embedding-3-small", dims},
		{"auto", "text-embedding-3-large", dims},
		{"auto", "nomic-embed-text", 0},
		{"auto", "text-embedding-ada-002", 0},
		{"always", "nomic-embed-text", dims},
		{"always", "text-embedding-3-small", dims},
		{"never", "text-embedding-3-small", 0},
		{"never", "nomic-embed-text", 0},
	} {
		t.Run(tc.setting+"/"+tc.model, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t, openaitest.Options{Dimensions: dims}, false, func(c *embedder.Config) {
				c.Model, c.SendDimensions = tc.model, tc.setting
			})
			_, err := c.Embed(t.Context(), someTexts(2))
			require.NoError(t, err)
			require.Equal(t, tc.want, b.srv.Served()[0].Dimensions)
		})
	}
	_, err := embedder.NewOpenAI(embedder.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m", Dimensions: dims, SendDimensions: "sometimes"})
	require.ErrorContains(t, err, `embedder.send_dimensions: "sometimes" is not "auto", "always" or "never"`)
}

func TestOpenAIEmptyInputSendsNothing(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, nil)
	vecs, err := c.Embed(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, vecs)
	require.Zero(t, b.srv.Requests.Load())
}

func TestOpenAIRejectsEmptyText(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, nil)
	_, err := c.Embed(t.Context(), []string{"a", ""})
	var ie *embedder.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, 1, ie.Index)
	requirePermanent(t, err, true)
	require.Zero(t, b.srv.Requests.Load())
}

func requirePermanent(t *testing.T, err error, want bool) {
	t.Helper()
	var p interface{ Permanent() bool }
	got := errors.As(err, &p) && p.Permanent()
	require.Equal(t, want, got, "Permanent() of %v", err)
}

func TestOpenAIBatching(t *testing.T) {
	t.Parallel()
	t.Run("by count", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t, openaitest.Options{MaxInputs: 5}, false, func(c *embedder.Config) { c.MaxBatchInputs = 5 })
		texts := someTexts(23)
		got, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		require.Equal(t, int64(5), b.srv.Requests.Load())
		require.Equal(t, []int{5, 5, 5, 5, 3}, b.srv.BatchSizes())
		want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
		require.NoError(t, err)
		require.Equal(t, want, got, "order is kept across batches")
	})
	t.Run("by tokens", func(t *testing.T) {
		t.Parallel()
		texts := make([]string, 10)
		for i := range texts {
			texts[i] = strings.Repeat(" hello", 10) // 10 tokens each
		}
		// 35 tokens per request fit 3 texts; the server enforces the same
		// limit, so a request over it would fail the test.
		c, b := setup(t, openaitest.Options{MaxTokens: 35}, false, func(c *embedder.Config) { c.MaxBatchTokens = 35 })
		_, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		require.Equal(t, []int{3, 3, 3, 1}, b.srv.BatchSizes())
		require.Equal(t, int64(4), b.srv.Requests.Load())
		require.Equal(t, int64(100), b.srv.Tokens.Load())
	})
	t.Run("server limit below client limit splits the batch", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t, openaitest.Options{MaxInputs: 5}, false, func(c *embedder.Config) { c.MaxBatchInputs = 10 })
		_, err := c.Embed(t.Context(), someTexts(8))
		require.NoError(t, err)
		require.Equal(t, []int{4, 4}, b.srv.BatchSizes())
		require.Equal(t, int64(3), b.srv.Requests.Load(), "the rejected 400 is split, not retried")
	})
}

func TestOpenAIRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		faults    []openaitest.Fault
		edit      func(*embedder.Config)
		wantWaits func(t *testing.T, waits []time.Duration)
	}{
		{name: "429 honours Retry-After",
			faults: []openaitest.Fault{{Status: 429, RetryAfter: "2"}, {Status: 429, RetryAfter: "7"}},
			wantWaits: func(t *testing.T, w []time.Duration) {
				require.Equal(t, []time.Duration{2 * time.Second, 7 * time.Second}, w)
			}},
		{name: "429 honours retry-after-ms",
			faults: []openaitest.Fault{{Status: 429, RetryAfter: "9", Header: http.Header{"Retry-After-Ms": {"120"}}}},
			wantWaits: func(t *testing.T, w []time.Duration) {
				require.Equal(t, []time.Duration{120 * time.Millisecond}, w)
			}},
		{name: "429 honours x-ratelimit-reset",
			faults: []openaitest.Fault{{Status: 429, Header: http.Header{
				"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Reset-Tokens": {"3.5s"}}}},
			wantWaits: func(t *testing.T, w []time.Duration) {
				require.Equal(t, []time.Duration{3500 * time.Millisecond}, w)
			}},
		{name: "429 without hints backs off",
			faults: []openaitest.Fault{{Status: 429}, {Status: 429}},
			wantWaits: func(t *testing.T, w []time.Duration) {
				require.Len(t, w, 2)
				require.InDelta(t, 375*time.Millisecond, w[0], float64(125*time.Millisecond))
				require.InDelta(t, 750*time.Millisecond, w[1], float64(250*time.Millisecond))
			}},
		{name: "500 then success", faults: []openaitest.Fault{{Status: 500}}},
		{name: "503 with Retry-After", faults: []openaitest.Fault{{Status: 503, RetryAfter: "1"}},
			wantWaits: func(t *testing.T, w []time.Duration) { require.Equal(t, []time.Duration{time.Second}, w) }},
		{name: "dropped connections", faults: []openaitest.Fault{{Drop: true}, {Drop: true}}},
		// The timeout must cut the minute-long reply and leave room for the
		// healthy retry on a loaded machine: 100ms failed the retry itself
		// under load.
		{name: "timeout", faults: []openaitest.Fault{{Delay: time.Minute}},
			edit: func(c *embedder.Config) { c.Timeout = 2 * time.Second }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t, openaitest.Options{}, false, tc.edit)
			for _, f := range tc.faults {
				b.srv.FailNext(1, f)
			}
			texts := someTexts(4)
			got, err := c.Embed(t.Context(), texts)
			require.NoError(t, err)
			want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
			require.NoError(t, err)
			require.Equal(t, want, got)
			n := int64(len(tc.faults))
			require.Equal(t, n+1, b.srv.Requests.Load(), "one attempt per fault plus the success")
			require.Equal(t, n, c.Stats().Retries)
			require.Len(t, b.Waits(), len(tc.faults))
			if tc.wantWaits != nil {
				tc.wantWaits(t, b.Waits())
			}
		})
	}
}

// TestOpenAIRetryAfterRealSleep runs the real wait, short, to check the
// path without the test hook.
func TestOpenAIRetryAfterRealSleep(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, true, nil)
	b.srv.FailNext(1, openaitest.Fault{Status: 429, Header: http.Header{"Retry-After-Ms": {"20"}}})
	_, err := c.Embed(t.Context(), someTexts(2))
	require.NoError(t, err)
	require.Equal(t, int64(2), b.srv.Requests.Load())
	require.Equal(t, 20*time.Millisecond, c.Stats().RetryWait)
}

func TestOpenAIPermanentErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    openaitest.Options
		fault   *openaitest.Fault
		edit    func(*embedder.Config)
		status  int
		wantMsg string
	}{
		{name: "401", opts: openaitest.Options{APIKey: "sk-right"}, status: 401,
			wantMsg: "set OPENAI_API_KEY / embedder.api_key"},
		{name: "404 model", opts: openaitest.Options{Models: []string{"text-embedding-3-large"}}, status: 404,
			wantMsg: "check embedder.model"},
		{name: "400", fault: &openaitest.Fault{Status: 400}, status: 400, wantMsg: "injected fault 400"},
		{name: "403", fault: &openaitest.Fault{Status: 403}, status: 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t, tc.opts, false, tc.edit)
			if tc.fault != nil {
				b.srv.FailNext(1, *tc.fault)
			}
			vecs, err := c.Embed(t.Context(), someTexts(2))
			require.Nil(t, vecs)
			var ae *embedder.APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, tc.status, ae.StatusCode)
			require.Equal(t, "text-embedding-3-small", ae.Model)
			require.ErrorContains(t, err, tc.wantMsg)
			requirePermanent(t, err, true)
			require.Equal(t, int64(1), b.srv.Requests.Load(), "permanent errors are not retried")
			require.Equal(t, int64(1), c.Stats().Failures)
		})
	}
}

// A whole answer of one wrong size is the model's: a configuration error
// whose advice keeps the index (no "change embedder.dimensions").
func TestOpenAIWrongDimensions(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, nil)
	b.srv.FailNext(1, openaitest.Fault{Dimensions: 3})
	_, err := c.Embed(t.Context(), someTexts(2))
	var de *embedder.DimensionError
	require.ErrorAs(t, err, &de)
	require.Equal(t, embedder.DimensionError{Model: "text-embedding-3-small", Got: 3, Want: dims, Sent: true}, *de)
	require.ErrorContains(t, err, `model "text-embedding-3-small" returned 3-dimension vectors, the index stores 24 (embedder.dimensions): set embedder.model (and embedder.base_url) to the model this index was built with, or build a new index for this model with `+"`ragsync reindex --to NEW --model text-embedding-3-small --dimensions 3`")
	require.NotContains(t, err.Error(), "set embedder.dimensions")
	requirePermanent(t, err, true)
	require.Equal(t, int64(1), b.srv.Requests.Load())

	// Not sent: the advice names send_dimensions.
	c2, b2 := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.SendDimensions = embedder.SendDimensionsNever })
	b2.srv.FailNext(1, openaitest.Fault{Dimensions: 3})
	_, err = c2.Embed(t.Context(), someTexts(1))
	require.ErrorAs(t, err, &de)
	require.ErrorContains(t, err, "if the model shortens vectors on request, set embedder.send_dimensions: always")
}

func TestOpenAIGivesUp(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries = 2 })
	b.srv.FailNext(10, openaitest.Fault{Status: 503})
	_, err := c.Embed(t.Context(), someTexts(2))
	require.ErrorContains(t, err, "3 attempts")
	var ae *embedder.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 503, ae.StatusCode)
	requirePermanent(t, err, false)
	require.Equal(t, int64(3), b.srv.Requests.Load())
	require.Equal(t, embedder.Stats{Requests: 3, Retries: 2, Failures: 1, RetryWait: c.Stats().RetryWait}, c.Stats())
}

func TestOpenAINoRetries(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.MaxRetries = -1 })
	b.srv.FailNext(1, openaitest.Fault{Status: 500})
	_, err := c.Embed(t.Context(), someTexts(2))
	require.Error(t, err)
	require.Equal(t, int64(1), b.srv.Requests.Load())
}

func TestOpenAICancelDuringWait(t *testing.T) {
	t.Parallel()
	c, b := setup(t, openaitest.Options{}, false, nil)
	ctx, cancel := context.WithCancel(t.Context())
	embedder.SetSleep(c, func(context.Context, time.Duration) error {
		cancel()
		return ctx.Err()
	})
	b.srv.FailNext(1, openaitest.Fault{Status: 429, RetryAfter: "30"})
	_, err := c.Embed(ctx, someTexts(2))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "429")
	require.Equal(t, int64(1), b.srv.Requests.Load())
}

func TestOpenAIAzure(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, openaitest.Options{APIKey: "azure-key"})
	c, err := embedder.NewOpenAI(embedder.Config{APIType: "azure", BaseURL: strings.TrimSuffix(srv.URL, "/v1"),
		Model: "my-deployment", APIKey: "azure-key", Dimensions: 16})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	vecs, err := c.Embed(t.Context(), someTexts(2))
	require.NoError(t, err)
	require.Len(t, vecs, 2)
	require.Equal(t, "my-deployment", srv.Served()[0].Model)
}

// TestOpenAIBase64Encoding: by default (auto) and with base64 the request
// asks for packed vectors and they equal JSON floats; float is not sent; a
// value other than auto, float or base64 is a config error naming the field.
func TestOpenAIBase64Encoding(t *testing.T) {
	t.Parallel()
	texts := someTexts(4)
	want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
	require.NoError(t, err)
	for _, format := range []string{"", embedder.EncodingAuto, embedder.EncodingBase64} {
		c, b := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.EncodingFormat = format })
		got, err := c.Embed(t.Context(), texts)
		require.NoError(t, err)
		require.Equal(t, want, got, "format %q", format)
		require.Equal(t, "base64", b.srv.Served()[0].EncodingFormat, "format %q", format)
	}

	f, fb := setup(t, openaitest.Options{}, false, func(c *embedder.Config) { c.EncodingFormat = embedder.EncodingFloat })
	got, err := f.Embed(t.Context(), texts)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Empty(t, fb.srv.Served()[0].EncodingFormat, "float is the API's default and is not sent")

	_, err = embedder.NewOpenAI(embedder.Config{Provider: "openai", BaseURL: fb.srv.URL, Model: "m", Dimensions: dims, EncodingFormat: "binary"})
	require.ErrorContains(t, err, "embedder.encoding_format")
}

// TestOpenAIBase64Unsupported: against a server without base64, auto asks
// for float from the second request on and embeds every text once: the
// numbers a server that ignores encoding_format sends back are used as they
// are, and a server that refuses the parameter embedded nothing, so only
// the refused request is sent again. Configured base64 fails permanently
// with an error naming the setting, rather than retrying.
func TestOpenAIBase64Unsupported(t *testing.T) {
	t.Parallel()
	texts := someTexts(3)
	want, err := embedder.NewHashing(dims).Embed(t.Context(), texts)
	require.NoError(t, err)
	for _, server := range []string{"ignore", "reject"} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t, openaitest.Options{NoBase64: server}, false, nil)
			for call := range 3 {
				got, err := c.Embed(t.Context(), texts)
				require.NoError(t, err, "call %d", call)
				require.Equal(t, want, got, "call %d", call)
			}
			wantRequests := map[string]int64{"ignore": 3, "reject": 4}[server]
			require.EqualValues(t, wantRequests, b.srv.Requests.Load(), "one request in base64, then float only")
			require.EqualValues(t, 3*len(texts), b.srv.Inputs.Load(), "every text embedded once")
			served := b.srv.Served()
			require.Empty(t, served[len(served)-1].EncodingFormat)
			require.Zero(t, c.Stats().Retries, "the switch is not a retry")

			strict, sb := setup(t, openaitest.Options{NoBase64: server}, false, func(c *embedder.Config) { c.EncodingFormat = embedder.EncodingBase64 })
			_, err := strict.Embed(t.Context(), texts) // its own err: the subtests run in parallel
			var enc *embedder.EncodingError
			require.ErrorAs(t, err, &enc)
			require.ErrorContains(t, err, "embedder.encoding_format")
			require.True(t, enc.Permanent())
			require.EqualValues(t, 1, sb.srv.Requests.Load(), "a permanent error is not retried")
		})
	}
}
