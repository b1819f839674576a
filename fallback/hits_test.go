package fallback

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

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
		{"provenance", `[{"doc_id":"d","score":0.5,"provenance":{"model":"m","model_version":"m-2026","dimensions":4,"chunker":"content-defined/512/128/1024","source":"pg:1/db","source_position":"pg:0000000000000001","committed_at":"2023-11-14T22:13:20Z","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}}]`, true},
		{"provenance unknown", `[{"doc_id":"d","provenance":{"model":"m","model_version":null,"dimensions":4,"chunker":null,"source":null,"source_position":null,"committed_at":null,"trace_id":null}}]`, true},
		{"provenance null", `[{"doc_id":"d","provenance":null}]`, true},
		{"provenance empty", `[{"provenance":{}}]`, true},
		{"provenance commit time with offset", `[{"provenance":{"committed_at":"2023-11-14T23:13:20.5+01:00"}}]`, true},
		{"provenance dimensions null", `[{"provenance":{"dimensions":null}}]`, true},
		{"provenance bad commit time", `[{"provenance":{"committed_at":"yesterday"}}]`, false},
		{"provenance commit time a number", `[{"provenance":{"committed_at":1700000000}}]`, false},
		{"provenance fractional dimensions", `[{"provenance":{"dimensions":4.5}}]`, false},
		{"provenance unknown key", `[{"provenance":{"modelz":"m"}}]`, false},
		{"provenance key in other case", `[{"provenance":{"Model":"m"}}]`, false},
		{"provenance repeated key", `[{"provenance":{"model":"a","model":"b"}}]`, false},
		{"provenance repeated null key", `[{"provenance":{"chunker":"a","chunker":null}}]`, false},
		{"provenance not an object", `[{"provenance":"m"}]`, false},
		{"provenance misspelt null", `[{"provenance":{"model":nul}}]`, false},
		{"provenance truncated", `[{"provenance":{"model":"m"`, false},
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
	f.Add(string(encodeHits([]sinkHit{provenanceHit(), {DocID: "d", Model: "m", Dimensions: 4}}, 2)))
	f.Add(`[{"provenance":{"committed_at":"2023-11-14T23:13:20.5+01:00","dimensions":null}}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		requireLikeJSON(t, raw)
	})
}

// provenanceHit is a hit whose provenance is all known.
func provenanceHit() sinkHit {
	return sinkHit{DocID: "public.articles/1", Table: "public.articles", Key: "1", Text: "t", Score: 0.5,
		Model: "text-embedding-3-small", Dimensions: 1536, ModelVersion: "text-embedding-3-small-2026-01-01",
		Chunker: "content-defined/512/128/1024", Source: "pg:7316999/appdb", SourcePosition: "pg:00000000016b3f40.0000000000000232",
		CommittedAt: time.Date(2026, 12, 1, 7, 0, 0, 250_000_000, time.FixedZone("", 3600)), TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
}

// A reply's hits carry their provenance: every field, unknown ones as
// null (a chunk written before provenance was recorded), and the client
// reads back what the sink returned.
func TestHitProvenanceOnTheWire(t *testing.T) {
	known, old := provenanceHit(), sinkHit{DocID: "public.articles/2", Model: "text-embedding-3-small", Dimensions: 1536}
	raw := encodeHits([]sinkHit{known, old}, 2)
	var generic []map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	require.Equal(t, map[string]any{"model": "text-embedding-3-small", "model_version": "text-embedding-3-small-2026-01-01",
		"dimensions": 1536.0, "chunker": "content-defined/512/128/1024", "source": "pg:7316999/appdb",
		"source_position": "pg:00000000016b3f40.0000000000000232", "committed_at": "2026-12-01T06:00:00.25Z",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}, generic[0]["provenance"])
	require.Equal(t, map[string]any{"model": "text-embedding-3-small", "model_version": nil, "dimensions": 1536.0,
		"chunker": nil, "source": nil, "source_position": nil, "committed_at": nil, "trace_id": nil}, generic[1]["provenance"],
		"unknown provenance is null, never an empty string or a zero time")

	hits, err := decodeHits(string(raw))
	require.NoError(t, err)
	_, fast := decodeHitsFast(string(raw))
	require.True(t, fast, "a reply as encodeHits writes it (without metadata) takes the fast path")
	require.Len(t, hits, 2)
	want := ProvenanceOf(known)
	want.CommittedAt = want.CommittedAt.UTC()
	require.Equal(t, want, hits[0].Provenance)
	require.Equal(t, ProvenanceOf(old), hits[1].Provenance)
	require.Empty(t, hits[1].Provenance.ModelVersion)
	require.True(t, hits[1].Provenance.CommittedAt.IsZero())
}

func BenchmarkDecodeHits(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var hits []sinkHit
	for i := range 10 {
		h := provenanceHit()
		h.Position, h.Text, h.Score = i, benchText(r, 60), r.Float64()
		hits = append(hits, h)
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
