package pipeline_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

type reuseBundle struct {
	store  *sink.Store
	pool   *pgxpool.Pool
	schema string
	emb    *countingEmbedder
}

func reuseSetup(t *testing.T) reuseBundle {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	st, err := sink.New(t.Context(), pool, sink.Config{Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	return reuseBundle{store: st, pool: pool, schema: schema, emb: &countingEmbedder{}}
}

// lenient is a reuse setting that reuses down to minSim whatever the
// words: a predictor whose slope puts minSim exactly at the default bound,
// and edits with new words reused (repaid first) instead of embedded.
func lenient(minSim float64) *pipeline.ReuseConfig {
	return &pipeline.ReuseConfig{MinSimilarity: minSim, NewWords: pipeline.NewWordsRepayFirst,
		Predictor: pipeline.NewPredictor(0.05 / (1 - minSim))}
}

// apply runs msgs through a pipeline with reuse setting cfg (nil: the
// defaults).
func (b reuseBundle) apply(t *testing.T, cfg *pipeline.ReuseConfig, msgs ...cdc.Record) pipeline.Snapshot {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 400, MinTokens: 10, MaxTokens: 1000})
	require.NoError(t, err)
	pc := pipeline.Config{Workers: 1, RetryBackoff: 1, MaxRetryBackoff: 2}
	if cfg != nil {
		pc.Reuse = *cfg
	}
	p, err := pipeline.New(pc, pipeline.Stages{
		Source:   &sliceSource{batches: [][]cdc.Record{msgs}},
		Splitter: ch, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p.Stats()
}

// row is a stored chunk's content and origin hash.
func (b reuseBundle) rows(t *testing.T, doc string) []sink.StoredChunk {
	t.Helper()
	cs, err := b.store.StoredChunks(t.Context(), doc)
	require.NoError(t, err)
	return cs
}

// fortyWords is one 40-word paragraph; edit k replaces words 0..k-1.
func fortyWords(k int) string {
	w := make([]string, 40)
	for i := range w {
		w[i] = fmt.Sprintf("word%d", i)
		if i < k {
			w[i] = fmt.Sprintf("edited%d", i)
		}
	}
	return strings.Join(w, " ")
}

// With 40 words and a 0.9 bound, a text may differ from its vector's origin
// by 4 replaced words (1 − 2·4/80 = 0.9): edits 1–4 reuse the first vector,
// edit 5 is 5 words from it and is embedded as the new origin, edits 6–9
// reuse that one, edit 10 is embedded again. Comparing with the previous
// version instead would reuse forever (each step is 1 word).
func TestReuseChainReembedsPastBoundFromOrigin(t *testing.T) {
	b := reuseSetup(t)
	cfg := lenient(0.9)
	msgs := []cdc.Record{event("c", 1, 10, fortyWords(0))}
	for k := 1; k <= 10; k++ {
		msgs = append(msgs, event("u", 1, int64(10+k), fortyWords(k)))
	}
	// One change at a time, checking the debt bound after each.
	var stats []pipeline.Snapshot
	for k, m := range msgs {
		stats = append(stats, b.apply(t, cfg, m))
		rows := b.rows(t, "public.docs/1")
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, chunker.Hash(fortyWords(k)), r.Hash)
		require.True(t, r.OriginCached)
		require.GreaterOrEqual(t, chunker.EditSimilarity(r.Text, r.OriginText, 0), 0.9,
			"version %d: the vector's origin must stay within the bound", k)
	}
	require.Equal(t, []string{fortyWords(0), fortyWords(5), fortyWords(10)}, b.emb.embedded())
	for k, s := range stats {
		want := 0
		if k != 0 && k != 5 && k != 10 {
			want = 1
		}
		require.Equal(t, want, s["chunks_reused"], "version %d", k)
	}
	// The reused vector is the origin's, not a new one.
	var same bool
	require.NoError(t, b.pool.QueryRow(t.Context(), fmt.Sprintf(
		"SELECT c.embedding = e.embedding FROM %[1]s.chunks c JOIN %[1]s.embedding_cache e ON e.content_hash = c.vector_hash", b.schema)).Scan(&same))
	require.True(t, same)
	// A reused vector is never cached under the new text's hash.
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), fmt.Sprintf("SELECT count(*) FROM %s.embedding_cache", b.schema)).Scan(&n))
	require.Equal(t, 3, n)
}

func TestReuseDisabledEmbedsEveryEdit(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipeline.ReuseConfig
	}{
		{"disabled", pipeline.ReuseConfig{Disabled: true}},
		{"bound 1 reuses only equal text", pipeline.ReuseConfig{MinSimilarity: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := reuseSetup(t)
			msgs := []cdc.Record{event("c", 1, 10, fortyWords(0))}
			for k := 1; k <= 3; k++ {
				msgs = append(msgs, event("u", 1, int64(10+k), fortyWords(k)))
			}
			s := b.apply(t, &tc.cfg, msgs...)
			require.Len(t, b.emb.embedded(), 4)
			require.Zero(t, s["chunks_reused"])
			r := b.rows(t, "public.docs/1")
			require.Equal(t, r[0].Hash, r[0].VectorHash)
		})
	}
}

// With the defaults (the monitor's bound 0.05 and the shipped slope 6),
// a 120-word chunk may lose a word (1 − 1/239: predicted 0.025) and keep
// its vector; an edit that brings a word the origin lacks is embedded at
// once, so the new word is searchable on commit.
func TestReuseDefaults(t *testing.T) {
	long := fortyWords(0) + " " + fortyWords(0) + " " + fortyWords(0) // 120 words
	t.Run("a word removed is reused", func(t *testing.T) {
		b := reuseSetup(t)
		edited := strings.Replace(long, "word7 ", "", 1)
		s := b.apply(t, nil, event("c", 1, 10, long), event("u", 1, 11, edited))
		require.Equal(t, 1, s["chunks_reused"])
		require.Len(t, b.emb.embedded(), 1)
		r := b.rows(t, "public.docs/1")[0]
		require.NotEqual(t, r.Hash, r.VectorHash)
		require.False(t, r.DebtSince.IsZero(), "a reused vector is recorded as debt")
		require.InDelta(t, pipeline.DefaultDistancePerEdit/239, r.DebtDistance, 1e-4)
		require.False(t, r.DebtNewWords)
	})
	t.Run("a new word is embedded", func(t *testing.T) {
		b := reuseSetup(t)
		edited := strings.Replace(long, "word7", "word7 citric", 1) // 1 − 1/241
		s := b.apply(t, nil, event("c", 1, 10, long), event("u", 1, 11, edited))
		require.Zero(t, s["chunks_reused"])
		require.Equal(t, 1, s["reuse_new_words_embedded"])
		require.Equal(t, []string{long, edited}, b.emb.embedded())
	})
	t.Run("past the predicted bound is embedded", func(t *testing.T) {
		b := reuseSetup(t)
		edited := strings.Replace(long, "word7 word8 word9 ", "", 1) // 1 − 3/237: predicted 0.076
		s := b.apply(t, nil, event("c", 1, 10, long), event("u", 1, 11, edited))
		require.Zero(t, s["chunks_reused"])
		require.Len(t, b.emb.embedded(), 2)
	})
}

func TestReuseOriginMissingEmbeds(t *testing.T) {
	for _, tc := range []struct {
		name string
		sql  string
	}{
		{"origin evicted from the cache", "DELETE FROM %s.embedding_cache"},
		{"origin text unknown (cached before migration 00002)", "UPDATE %s.embedding_cache SET text = NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := reuseSetup(t)
			cfg := lenient(0.9)
			b.apply(t, cfg, event("c", 1, 10, fortyWords(0)))
			_, err := b.pool.Exec(t.Context(), fmt.Sprintf(tc.sql, b.schema))
			require.NoError(t, err)
			s := b.apply(t, cfg, event("u", 1, 11, fortyWords(1)))
			require.Zero(t, s["chunks_reused"])
			require.Equal(t, 1, s["chunks_embedded"])
			require.Equal(t, []string{fortyWords(0), fortyWords(1)}, b.emb.embedded())
		})
	}
}

func TestReuseAcrossUnrelatedParagraphsDoesNotHappen(t *testing.T) {
	b := reuseSetup(t)
	s := b.apply(t, &pipeline.ReuseConfig{}, event("c", 1, 10, paraA), event("u", 1, 11, paraB))
	require.Zero(t, s["chunks_reused"])
	require.Equal(t, []string{paraA, paraB}, b.emb.embedded())
}

func TestReuseConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     pipeline.ReuseConfig
		wantErr string
	}{
		{"zero is the default", pipeline.ReuseConfig{}, ""},
		{"negative", pipeline.ReuseConfig{MinSimilarity: -0.5}, "reuse.min_similarity"},
		{"above one", pipeline.ReuseConfig{MinSimilarity: 1.5}, "reuse.min_similarity"},
		{"unknown method", pipeline.ReuseConfig{Method: "ssdeep"}, "reuse.method"},
		{"shingle", pipeline.ReuseConfig{Method: "shingle", MinSimilarity: 0.9}, ""},
		{"unknown new-words policy", pipeline.ReuseConfig{NewWords: "ignore"}, "reuse.new_words"},
		{"bound out of range", pipeline.ReuseConfig{Bound: 3}, "monitor.cosine_bound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			_, perr := pipeline.New(pipeline.Config{Reuse: tc.cfg}, pipeline.Stages{})
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, perr, tc.wantErr, "pipeline.New checks the reuse settings")
		})
	}
}

func TestEditMagnitudeRecorded(t *testing.T) {
	b := reuseSetup(t)
	long := strings.Repeat(fortyWords(0)+" ", 20) // > 4096 bytes
	b.apply(t, nil,
		event("c", 1, 10, long), event("u", 1, 11, long+" appended words here"),
		event("c", 2, 12, "short text one two three"), event("u", 2, 13, "short text one two four"),
		event("c", 3, 14, long))
	type rec struct {
		fuzzy  bool
		sim    *int16
		method *string
	}
	read := func(id string) rec {
		var r rec
		require.NoError(t, b.pool.QueryRow(t.Context(), fmt.Sprintf(
			"SELECT fuzzy_hash IS NOT NULL, edit_similarity, edit_method FROM %s.documents WHERE id = $1", b.schema), id).
			Scan(&r.fuzzy, &r.sim, &r.method))
		return r
	}
	// Measured from the chunk diff, in words: no ssdeep hash is computed
	// at write time (ragsync dupes hashes the texts stored without one).
	l := read("public.docs/1")
	require.False(t, l.fuzzy, "an update computes no ssdeep hash")
	require.Equal(t, chunker.MethodWords, *l.method)
	require.Equal(t, int16(100), *l.sim) // 3 words appended to 800: 1 − 3/1603, rounded
	s := read("public.docs/2")
	require.False(t, s.fuzzy)
	require.Equal(t, chunker.MethodWords, *s.method)
	require.Equal(t, int16(80), *s.sim) // one word of five replaced: 1 − 2/10
	n := read("public.docs/3")
	require.False(t, n.fuzzy, "a new document is not hashed (ragsync dupes hashes it)")
	require.Nil(t, n.sim)
}
