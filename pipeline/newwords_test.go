package pipeline_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// hashingEmbedder is the offline embedder with the pipeline's interface.
type hashingEmbedder struct{ *embedder.Hashing }

// article is a ~300-word text on topic, drawn from a small shared
// vocabulary so that documents resemble each other.
func article(topic string, seed uint64) string {
	vocab := strings.Fields("clean kitchen vinegar water bottle spray surface stain cloth rinse baking soda lemon " +
		"sink towel scrub brush glass window floor mop bucket dust oven grease soap warm cold mix")
	rng := rand.New(rand.NewPCG(seed, 3))
	var b strings.Builder
	for i := range 300 {
		if i%12 == 0 {
			b.WriteString(topic + " ")
		}
		b.WriteString(vocab[rng.IntN(len(vocab))] + " ")
	}
	return strings.TrimSpace(b.String()) + "."
}

// TestAppendedSentenceIsFindable: a sentence appended to a document is
// found by a vector-only query of that sentence, ranking the document
// first: at once by default (an edit that brings new words is embedded),
// or, when new words are set to be repaid first, once the repayment has
// run within its window (before it, the hit is marked reused).
func TestAppendedSentenceIsFindable(t *testing.T) {
	const sentence = "Citric acid works as well and smells of nothing."
	for _, tc := range []struct {
		name  string
		reuse pipeline.ReuseConfig
		debt  bool
	}{
		{"default embeds new words", pipeline.ReuseConfig{}, false},
		{"repay first", pipeline.ReuseConfig{NewWords: pipeline.NewWordsRepayFirst, Predictor: pipeline.NewPredictor(0.5),
			Now: func(time.Time) time.Time { return t0 }}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, schema := pgtest.Schema(t)
			emb := hashingEmbedder{embedder.NewHashing(256)}
			st, err := sink.New(t.Context(), pool, sink.Config{Schema: schema, Index: "docs", Model: embedder.HashingModel, Dimensions: 256})
			require.NoError(t, err)
			// Unrefined: the edit's chunk is to reuse its stored vector,
			// and a region's first edit, refined, holds pieces no stored
			// chunk resembles.
			split, err := chunker.New(chunker.Config{RefineTargetTokens: chunker.RefineOff})
			require.NoError(t, err)
			run := func(msgs ...cdc.Record) pipeline.Snapshot {
				p, err := pipeline.New(pipeline.Config{Workers: 2, Reuse: tc.reuse}, pipeline.Stages{
					Source:   &sliceSource{batches: [][]cdc.Record{msgs}},
					Splitter: split, Target: pipeline.Target{Name: "docs", Index: st, Embedder: emb},
				})
				require.NoError(t, err)
				require.NoError(t, p.Run(t.Context()))
				return p.Stats()
			}
			// Twenty look-alike documents, two of which already hold some
			// of the sentence's words.
			var creates []cdc.Record
			texts := map[int]string{}
			for i := 1; i <= 20; i++ {
				texts[i] = article(fmt.Sprintf("topic%d", i), uint64(i))
				switch i {
				case 2:
					texts[i] += " Citric acid is sold in bags."
				case 3:
					texts[i] += " It smells of nothing at all and works as well."
				}
				creates = append(creates, event("c", i, int64(10*i), texts[i]))
			}
			run(creates...)
			s := run(event("u", 1, 1000, texts[1]+" "+sentence))
			q, err := emb.Embed(t.Context(), []string{sentence})
			require.NoError(t, err)
			top := func() sink.Hit {
				hits, err := st.Search(t.Context(), q[0], sink.Query{K: 1})
				require.NoError(t, err)
				require.NotEmpty(t, hits)
				return hits[0]
			}
			if !tc.debt {
				require.Zero(t, s["chunks_reused"])
				require.Equal(t, "public.docs/1", top().DocID, "found on commit")
				require.False(t, top().Reused)
				return
			}
			require.Equal(t, 1, s["chunks_reused"], "fixture: the edit reuses")
			require.Equal(t, 1, s["reuse_new_words_deferred"])
			debts, err := st.NextDebt(t.Context(), t0, 10)
			require.NoError(t, err)
			require.Len(t, debts, 1)
			require.True(t, debts[0].NewWords, "recorded as new words, repaid first")
			before := top()
			t.Logf("before the repayment the top hit is %s (reused vector: %v)", before.DocID, before.Reused)
			c := &clock{t: t0.Add(5 * time.Minute)}
			r, err := pipeline.NewRepayer(pipeline.DebtConfig{Now: c.now}, st, emb)
			require.NoError(t, err)
			res, err := r.RepayOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, 1, res.Repaid, "repaid within the 5m window")
			hit := top()
			require.Equal(t, "public.docs/1", hit.DocID, "found once repaid")
			require.False(t, hit.Reused)
		})
	}
}
