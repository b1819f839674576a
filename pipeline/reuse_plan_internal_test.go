package pipeline

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// planReuseReference is planReuse as it was before it cut each text into
// words once and ruled origins out by word count: every comparison
// normalised both texts again. TestPlanReuseMatchesReference holds the
// planner to its decisions.
func planReuseReference(p *Pipeline, cfg ReuseConfig, stored []sink.StoredChunk, doc *sink.Document, missing []int) []int {
	minSim := max(cfg.MinSimilarity, cfg.Predictor.MinSimilarity(cfg.Bound))
	if minSim >= 1 {
		return missing
	}
	type ref struct {
		hash, text string
		words      map[string]bool
		since      time.Time
	}
	similarity := func(a, b string, min float64) float64 {
		if cfg.Method == ReuseMethodShingle {
			return chunker.ShingleSimilarity(a, b)
		}
		return chunker.EditSimilarity(a, b, min)
	}
	byHash := make(map[string]sink.StoredChunk, len(stored))
	var origins []ref
	at := map[string]int{}
	for _, s := range stored {
		if s.OriginCached {
			byHash[s.Hash] = s
		}
		if !s.OriginCached || s.OriginText == "" {
			continue
		}
		i, ok := at[s.VectorHash]
		if !ok {
			i = len(origins)
			at[s.VectorHash] = i
			origins = append(origins, ref{hash: s.VectorHash, text: chunker.Normalize(s.OriginText)})
		}
		if o := &origins[i]; !s.DebtSince.IsZero() && (o.since.IsZero() || s.DebtSince.Before(o.since)) {
			o.since = s.DebtSince
		}
	}
	now := cfg.Now(doc.SourceTS)
	var rest []int
	for _, i := range missing {
		c := &doc.Chunks[i]
		if s, ok := byHash[c.Hash]; ok && s.VectorHash != c.Hash {
			c.VectorHash, c.DebtSince, c.DebtDistance, c.DebtNewWords = s.VectorHash, s.DebtSince, s.DebtDistance, s.DebtNewWords
			if c.DebtSince.IsZero() {
				c.DebtSince = now
			}
			continue
		}
		text := chunker.Normalize(c.Text)
		best, bestSim := -1, 0.0
		for j, o := range origins {
			if sim := similarity(text, o.text, minSim); sim >= minSim && sim > bestSim {
				best, bestSim = j, sim
			}
		}
		if best < 0 {
			rest = append(rest, i)
			continue
		}
		o := &origins[best]
		if o.words == nil {
			o.words = map[string]bool{}
			for _, w := range splitWords(o.text) {
				o.words[w] = true
			}
		}
		fresh := false
		for _, w := range splitWords(text) {
			fresh = fresh || !o.words[w]
		}
		if fresh && cfg.NewWords == NewWordsEmbed {
			p.stats.add("reuse_new_words_embedded", 1)
			rest = append(rest, i)
			continue
		}
		if fresh {
			p.stats.add("reuse_new_words_deferred", 1)
		}
		c.VectorHash, c.DebtDistance, c.DebtNewWords, c.DebtSince = o.hash, cfg.Predictor.Predict(bestSim), fresh, o.since
		if c.DebtSince.IsZero() {
			c.DebtSince = now
		}
	}
	return rest
}

// TestPlanReuseMatchesReference: on random documents and edits (changed,
// added and dropped words, reflowed layout, repeated paragraphs, origins
// reused before, gone from the cache or without text, chunks of very
// different lengths), planReuse takes the same vectors, with the same debt,
// and embeds the same chunks as planReuseReference, for both methods, both
// new-word policies and several floors.
func TestPlanReuseMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	word := func() string {
		ws := []string{"alpha", "beta", "gamma", "delta", "café", "cafe\u0301", "Zeta", "eta", "theta", "iota", "kappa", "42", "x-ray", "Don't", "end.", "ÉTÉ", "\ufb01ne", "(v2)"}
		return ws[rng.IntN(len(ws))]
	}
	para := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = word() + fmt.Sprint(rng.IntN(30))
		}
		return out
	}
	layout := func(ws []string) string {
		var b strings.Builder
		for i, w := range ws {
			if i > 0 {
				b.WriteString([]string{" ", " ", " ", "  ", "\n", "\u00a0"}[rng.IntN(6)])
			}
			b.WriteString(w)
		}
		return b.String()
	}
	edit := func(ws []string, k int) []string {
		out := append([]string(nil), ws...)
		for range k {
			switch i := rng.IntN(len(out) + 1); rng.IntN(3) {
			case 0:
				out = append(out[:i:i], append([]string{word()}, out[i:]...)...)
			case 1:
				if i < len(out) {
					out = append(out[:i], out[i+1:]...)
				}
			default:
				if i < len(out) {
					out[i] = word()
				}
			}
		}
		return out
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	compared := 0
	for trial := range 400 {
		// The stored version.
		var stored []sink.StoredChunk
		var paras [][]string
		for pos := range 1 + rng.IntN(8) {
			ws := para([]int{3, 20, 60, 61, 62, 120}[rng.IntN(6)])
			if pos > 0 && rng.IntN(6) == 0 {
				ws = paras[rng.IntN(len(paras))] // a repeated paragraph
			}
			paras = append(paras, ws)
			text := layout(ws)
			s := sink.StoredChunk{Position: pos, Hash: chunker.Hash(text), Text: text, OriginCached: rng.IntN(8) > 0}
			s.VectorHash, s.OriginText = s.Hash, text
			switch rng.IntN(6) {
			case 0: // a reused vector: its origin is an older text
				o := layout(edit(ws, 1+rng.IntN(3)))
				s.VectorHash, s.OriginText = chunker.Hash(o), o
				s.DebtSince, s.DebtDistance, s.DebtNewWords = base.Add(time.Duration(rng.IntN(100))*time.Minute), rng.Float64()/20, rng.IntN(2) == 0
			case 1: // a cache entry that predates origin texts
				s.OriginText = ""
			}
			if !s.OriginCached {
				s.OriginText = ""
			}
			stored = append(stored, s)
		}
		// The new version: kept, edited, new and dropped paragraphs.
		var chunks []sink.Chunk
		for _, ws := range paras {
			switch rng.IntN(5) {
			case 0:
				continue
			case 1:
				ws = para(len(ws))
			case 2, 3:
				ws = edit(ws, rng.IntN(4))
			}
			text := layout(ws)
			chunks = append(chunks, sink.Chunk{Position: len(chunks), Hash: chunker.Hash(text), Text: text})
		}
		var missing []int
		for i := range chunks {
			if rng.IntN(4) > 0 {
				missing = append(missing, i)
			}
		}
		cfg := ReuseConfig{
			Method:        []string{ReuseMethodEdit, ReuseMethodShingle}[trial%2],
			NewWords:      []string{NewWordsEmbed, NewWordsRepayFirst}[trial/2%2],
			MinSimilarity: []float64{0.5, 0.8, 0.9, 0.97}[trial/4%4],
			Predictor:     NewPredictor([]float64{0.2, 1, 6}[trial%3]),
			Now:           func(time.Time) time.Time { return base.Add(time.Hour) },
		}.withDefaults()
		got, want := &Pipeline{stats: newStats()}, &Pipeline{stats: newStats()}
		gotDoc := sink.Document{Chunks: append([]sink.Chunk(nil), chunks...)}
		wantDoc := sink.Document{Chunks: append([]sink.Chunk(nil), chunks...)}
		gotRest := got.planReuse(cfg, stored, &gotDoc, append([]int(nil), missing...))
		wantRest := planReuseReference(want, cfg, stored, &wantDoc, append([]int(nil), missing...))
		require.Equal(t, wantRest, gotRest, "trial %d: chunks to embed", trial)
		require.Equal(t, wantDoc.Chunks, gotDoc.Chunks, "trial %d: vectors taken and their debt", trial)
		require.Equal(t, want.stats.snapshot(), got.stats.snapshot(), "trial %d", trial)
		for _, c := range gotDoc.Chunks {
			if c.VectorHash != "" {
				compared++
			}
		}
	}
	require.Greater(t, compared, 100, "the trials reuse vectors, so the decisions compared are not all to embed")
}

// TestEachWordMatchesSplitWords: the allocation-free cut of a word gives
// splitWords' words, in order, for ASCII (mixed case, digits, punctuation)
// and for other text.
func TestEachWordMatchesSplitWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	parts := []string{"a", "Z", "q", "7", "-", ".", "'", "_", "(", "É", "é", "ß", "İ", "\ufb01", "Ω", "٣", "\xff", "AbC", "x9"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(8) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		w := b.String()
		var got []string
		eachWord(w, func(x string) { got = append(got, x) })
		want := splitWords(w)
		if len(want) == 0 {
			want = nil
		}
		require.Equal(t, want, got, "%q", w)
	}
}
