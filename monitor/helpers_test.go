package monitor_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

const testDims = 64

type bundle struct {
	pool   *pgxpool.Pool
	schema string
	srv    *openaitest.Server
	emb    *embedder.OpenAI
	st     *sink.Store
	reg    *prometheus.Registry
}

// setup gives a migrated schema with an index "docs" over the fake
// embedding API (model "embed-1", 64 dimensions).
func setup(t *testing.T) *bundle {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	srv := openaitest.New(t, openaitest.Options{Dimensions: testDims})
	emb, err := embedder.NewOpenAI(embedder.Config{Provider: "openai", BaseURL: srv.URL, Model: "embed-1", Dimensions: testDims, MaxRetries: -1}.WithDefaults())
	require.NoError(t, err)
	t.Cleanup(emb.Close)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "embed-1", Dimensions: testDims})
	require.NoError(t, err)
	return &bundle{pool: pool, schema: schema, srv: srv, emb: emb, st: st, reg: prometheus.NewRegistry()}
}

func (b *bundle) monitor(t *testing.T, cfg monitor.Config, pubs ...monitor.Publisher) *monitor.Monitor {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if b.reg != nil {
		cfg.Registerer = b.reg
	}
	m, err := monitor.New(t.Context(), cfg, monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb,
		Publishers: pubs, ModelVersion: b.emb.ReportedModel, BaselineBy: "serve"})
	require.NoError(t, err)
	return m
}

// upsert writes one document whose chunks are texts with their own
// vectors from the fake API.
func (b *bundle) upsert(t *testing.T, key string, v uint64, texts ...string) {
	t.Helper()
	vecs, err := b.emb.Embed(t.Context(), texts)
	require.NoError(t, err)
	d := sink.Document{Table: "public.docs", Key: key, Version: cdc.Version{Kind: "pg", Parts: []uint64{v}}}
	for i, s := range texts {
		d.Chunks = append(d.Chunks, sink.Chunk{Position: i, Hash: chunker.Hash(s), Text: s, Tokens: chunker.CountTokens(s), Vector: vecs[i]})
	}
	_, err = b.st.Upsert(t.Context(), d)
	require.NoError(t, err)
}

// swap is a different model behind the same name: a fixed rotation of
// the coordinates with a sign flip, then renormalised.
func swap(_, _ string, v []float32) []float32 {
	out := make([]float32, len(v))
	for i := range v {
		j := (i*7 + 3) % len(v)
		out[j] = v[i]
		if i%2 == 0 {
			out[j] = -v[i]
		}
	}
	return out
}

// noise is a provider's nondeterminism: a small deterministic-per-call
// perturbation (relative size about 1e-3 per coordinate), renormalised.
func noise(seed *uint64) func(_, _ string, v []float32) []float32 {
	return func(_, _ string, v []float32) []float32 {
		out := make([]float32, len(v))
		var n float64
		for i := range v {
			*seed = *seed*6364136223846793005 + 1442695040888963407
			r := float64(int64(*seed>>11))/float64(1<<52) - 1 // [-1, 1)
			out[i] = v[i] + float32(r*1e-3)
			n += float64(out[i]) * float64(out[i])
		}
		for i := range out {
			out[i] = float32(float64(out[i]) / math.Sqrt(n))
		}
		return out
	}
}

var openaitestFault503 = openaitest.Fault{Status: 503}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
