package embedder

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServerWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
		wantOK bool
	}{
		{name: "none", header: nil},
		{name: "retry-after seconds", header: map[string]string{"Retry-After": "3"}, want: 3 * time.Second, wantOK: true},
		{name: "retry-after fraction", header: map[string]string{"Retry-After": "0.25"}, want: 250 * time.Millisecond, wantOK: true},
		{name: "retry-after date", header: map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)},
			want: 7 * time.Second, wantOK: true},
		{name: "retry-after date in the past", header: map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)},
			want: 0, wantOK: true},
		{name: "ms wins over seconds", header: map[string]string{"Retry-After": "20", "retry-after-ms": "150"},
			want: 150 * time.Millisecond, wantOK: true},
		{name: "ratelimit resets take the later", header: map[string]string{
			"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, want: 6 * time.Minute, wantOK: true},
		{name: "huge value is capped", header: map[string]string{"Retry-After": "86400"}, want: maxServerWait, wantOK: true},
		{name: "garbage ignored", header: map[string]string{"Retry-After": "soon", "x-ratelimit-reset-tokens": "later"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h http.Header
			if tc.header != nil {
				h = http.Header{}
				for k, v := range tc.header {
					h.Set(k, v)
				}
			}
			got, ok := serverWait(h, now)
			require.Equal(t, tc.wantOK, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for attempt := range 40 {
		want := backoffCap
		if attempt < 16 {
			want = min(backoffBase<<attempt, backoffCap)
		}
		for range 20 {
			d := backoff(attempt)
			require.GreaterOrEqual(t, d, want/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, want, "attempt %d", attempt)
		}
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	word := "hello"                     // 1 token
	four := strings.Repeat(" hello", 4) // 4 tokens
	tests := []struct {
		name      string
		texts     []string
		maxInputs int
		maxTokens int
		want      []span
	}{
		{name: "one batch", texts: []string{word, word, word}, maxInputs: 10, maxTokens: 100, want: []span{{0, 3}}},
		{name: "by count", texts: []string{word, word, word, word, word}, maxInputs: 2, maxTokens: 100,
			want: []span{{0, 2}, {2, 4}, {4, 5}}},
		{name: "by tokens", texts: []string{four, four, four, word}, maxInputs: 10, maxTokens: 9,
			want: []span{{0, 2}, {2, 4}}},
		{name: "oversize text alone", texts: []string{word, four, word}, maxInputs: 10, maxTokens: 3,
			want: []span{{0, 1}, {1, 2}, {2, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			toks, err := counts(tc.texts, nil)
			require.NoError(t, err)
			require.Equal(t, tc.want, batches(toks, tc.maxInputs, tc.maxTokens))
		})
	}
}
