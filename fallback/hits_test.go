package fallback

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeHits(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantFast bool
	}{
		{"empty", `[]`, true},
		{"as encodeHits writes it", `[{"doc_id":"public.articles/1","table":"public.articles","key":"1","position":2,"text":"Redis streams","score":0.8125}]`, true},
		{"keys in another order, some missing", `[{"text":"t","score":-1.5e-3,"doc_id":"d"},{}]`, true},
		{"utf-8 text", `[{"text":"Grüße, 東京"}]`, true},
		{"metadata", `[{"doc_id":"d","metadata":{"lang":"en"}}]`, false},
		{"escaped text", `[{"text":"say \"hi\"\n"}]`, false},
		{"whitespace", `[ {"text":"t"} ]`, false},
		{"null field", `[{"text":null}]`, false},
		{"key in other case", `[{"TEXT":"t"}]`, false},
		{"repeated key", `[{"text":"a","text":"b"}]`, false},
		{"fractional position", `[{"position":1.5}]`, false},
		{"huge score", `[{"score":1e400}]`, false},
		{"leading zero", `[{"position":01}]`, false},
		{"trailing garbage", `[{"text":"t"}]x`, false},
		{"invalid utf-8", "[{\"text\":\"\xff\"}]", false},
		{"null", `null`, false},
		{"truncated", `[{"text":"t"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, fast := decodeHitsFast(tc.raw)
			require.Equal(t, tc.wantFast, fast)
			requireLikeJSON(t, tc.raw)
		})
	}
}

// requireLikeJSON checks decodeHits against json.Unmarshal on raw: the same
// hits, or an error where it errs.
func requireLikeJSON(t *testing.T, raw string) {
	t.Helper()
	got, err := decodeHits(raw)
	var want []Hit
	wantErr := json.Unmarshal([]byte(raw), &want)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error())
		return
	}
	require.NoError(t, err)
	require.Equal(t, want, got, "decodeHits(%q) differs from json.Unmarshal", raw)
}

func FuzzDecodeHits(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	var hits []sinkHit
	for i := range 3 {
		hits = append(hits, sinkHit{DocID: "public.articles/1", Table: "public.articles", Key: "1", Position: i,
			Text: strings.Repeat("cosine search ", r.IntN(5)), Score: r.Float64()})
	}
	f.Add(string(encodeHits(hits, len(hits))))
	f.Add(`[{"doc_id":"d","metadata":{"lang":"en"}}]`)
	f.Add(`[{"score":-0.0E+12,"position":-7}]`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, raw string) {
		requireLikeJSON(t, raw)
	})
}

func BenchmarkDecodeHits(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var hits []sinkHit
	for i := range 10 {
		hits = append(hits, sinkHit{DocID: "public.articles/1", Table: "public.articles", Key: "1", Position: i, Text: benchText(r, 60), Score: r.Float64()})
	}
	raw := string(encodeHits(hits, len(hits)))
	b.SetBytes(int64(len(raw)))
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeHits(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var h []Hit
			if err := json.Unmarshal([]byte(raw), &h); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestHasControl(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"", false},
		{"plain ascii text, longer than eight bytes", false},
		{"tab\there", true},
		{"0123456789abcdef\x1f", true},
		{"\x00", true},
		{"\x7f\x80\x9f\xa0\xff space \x20", false},
		{"Grüße, 東京 and more than eight bytes", false},
		{"01234567\n", true},
	} {
		require.Equal(t, tc.want, hasControl(tc.s), "%q", tc.s)
	}
}
