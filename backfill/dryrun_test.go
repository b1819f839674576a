package backfill_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestDryRunPredictsTokensSent: a dry run's tokens to embed, after the cache,
// equal what the real backfill then sends to the API, within 1%; and the dry
// run writes nothing and calls nothing.
func TestDryRunPredictsTokensSent(t *testing.T) {
	w := newWorld(t)
	w.seed(60)
	ctx := context.Background()
	// Shared text across documents: the cache and in-run dedup must show in
	// the prediction, not only in the real run.
	_, err := w.src.Exec(ctx, "UPDATE "+w.table()+" SET body = $1 WHERE id > 45", body(1, 0))
	require.NoError(t, err)

	srv := openaitest.New(t, openaitest.Options{})
	emb, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, Model: "text-embedding-3-small", Dimensions: 32,
		APIKey: "sk-test", Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(emb.Close)
	st := w.store("articles", emb)

	// Part of the table is indexed already: its chunks are in the cache.
	part := w.config(10)
	part.Tables[0].Where = "t.id <= 20"
	w.backfill(part, nil, emb, st)
	sentBefore := srv.Tokens.Load()
	require.Positive(t, sentBefore)
	docsBefore := w.docs("articles")

	dry := backfill.NewDryRun(st, emb.Dimensions())
	w.backfill(w.config(10), nil, dry, dry)
	est := dry.Estimate()
	require.Equal(t, sentBefore, srv.Tokens.Load(), "a dry run calls no embedding API")
	require.Equal(t, docsBefore, w.docs("articles"), "a dry run writes nothing")
	require.Equal(t, int64(60), est.Documents)
	require.Positive(t, est.Tokens)

	w.backfill(w.config(10), nil, emb, st)
	sent := srv.Tokens.Load() - sentBefore
	t.Logf("dry run predicted %d tokens (%d texts, %d calls); the real run sent %d", est.Tokens, est.Texts, est.Requests, sent)
	require.InDelta(t, float64(sent), float64(est.Tokens), math.Max(1, 0.01*float64(sent)), "prediction within 1%%")

	// Cost and time follow from the counts.
	require.InDelta(t, float64(est.Tokens)/1e6*0.02, est.Cost(0.02), 1e-12)
	require.Equal(t, time.Duration(float64(est.Tokens)/1000*float64(time.Minute)), est.Duration(0, 1000))
	require.Equal(t, time.Duration(0), est.Duration(0, 0), "no limits, no wait")
}
