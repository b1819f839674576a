package monitor_test

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// TestHalfRoundMatchesPgvector: the monitor's half-precision rounding is
// pgvector's, value for value: ordinary embedding values, ties (to even),
// values that become subnormal or zero at half precision, and the largest
// half. A rounding that truncated, or flushed subnormals, would measure a
// storage error the index does not have.
func TestHalfRoundMatchesPgvector(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Schema(t)
	rng := rand.New(rand.NewPCG(7, 11))
	v := []float32{1 + 1.0/2048, 1 + 3.0/2048, -(1 + 1.0/2048), 1e-5, -3e-6, 1e-8, 6.1e-5, 65504, 0, 0.1, -0.333333}
	for range 2000 {
		v = append(v, float32(rng.NormFloat64()/math.Sqrt(1536)))
	}
	var got pgvector.Vector
	require.NoError(t, pool.QueryRow(ctxT(t), "SELECT $1::vector::halfvec::vector", pgvector.NewVector(v)).Scan(&got))
	want := got.Slice()
	mine := monitor.HalfRound(v)
	require.Len(t, mine, len(want))
	for i := range v {
		require.Equal(t, want[i], mine[i], "component %d: %g", i, v[i])
	}
	require.NotEqual(t, v[20], mine[20], "ordinary values do change at half precision")
}

// TestFidelityStorageErrorByType: the fidelity check works on every
// vector type and measures the storage's own error. On a halfvec index
// the canary baselines are compared as the index stores them (rounded),
// so with an unchanged model the canary score is exactly the storage's
// part, which the signal reports beside it, and the sampled stored
// vectors (read back from the halfvec column) are off by as little. A
// vector index reports no storage part and measures 0; a bit index stores
// the full vector, reports 0 and says its error shows in recall.
func TestFidelityStorageErrorByType(t *testing.T) {
	t.Parallel()
	for _, vt := range []sink.VectorType{sink.TypeVector, sink.TypeHalfvec, sink.TypeBit} {
		t.Run(string(vt), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pool, schema := b.pool, b.schema
			st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "typed", Model: "embed-1",
				Dimensions: testDims, Type: vt, Create: true})
			require.NoError(t, err)
			require.Equal(t, vt, st.Identity().Type)
			b.st = st
			for i := range 6 {
				b.upsert(t, string(rune('a'+i)), 1, "alpha beta gamma "+string(rune('a'+i)), "delta epsilon zeta "+string(rune('a'+i)))
			}
			cfg := monitor.Config{SampleSize: 8, UniformShare: 1,
				Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
			m, err := monitor.New(t.Context(), cfg, monitor.Deps{Pool: pool, Schema: schema, Index: "typed", Embedder: b.emb,
				BaselineBy: "serve", VectorType: vt})
			require.NoError(t, err)
			res, err := m.Check(ctxT(t), monitor.CheckOptions{NoPublish: true})
			require.NoError(t, err)
			require.False(t, res.Breach, "the storage's error stays far under the bound: %+v", res.Fidelity)
			canary := findEvent(t, res.Events, monitor.TagFidelity, "canary_p50_cosine")
			uniform := findEvent(t, res.Events, monitor.TagFidelity, "uniform_share_over_bound")
			var sampled monitor.Aggregate
			for _, a := range res.Fidelity {
				if a.Kind == monitor.KindUniform {
					sampled = a
				}
			}
			require.Positive(t, sampled.N, "the sample measured stored vectors")
			switch vt {
			case sink.TypeVector:
				require.Nil(t, canary.Signal.Storage)
				require.Nil(t, uniform.Signal.Storage)
				require.Zero(t, canary.Signal.Score)
				require.Zero(t, sampled.Max)
			case sink.TypeHalfvec:
				s := canary.Signal.Storage
				require.NotNil(t, s)
				require.Equal(t, "halfvec", s.VectorType)
				require.Positive(t, s.P50)
				require.Less(t, s.Max, 1e-5, "half precision moves a dense unit vector by about 2e-8")
				require.InDelta(t, s.P50, canary.Signal.Score, 1e-12, "an unchanged model: the canary score is the storage's part")
				require.NotNil(t, uniform.Signal.Storage)
				require.Positive(t, sampled.Max, "the stored vectors were read back rounded")
				require.Less(t, sampled.Max, 1e-5)
			case sink.TypeBit:
				s := canary.Signal.Storage
				require.NotNil(t, s)
				require.Equal(t, "bit", s.VectorType)
				require.Zero(t, s.P50)
				require.Zero(t, s.Max)
				require.Contains(t, s.Note, "recall")
				require.Zero(t, canary.Signal.Score)
				require.Zero(t, sampled.Max, "a bit index stores the full vector")
			}
		})
	}
}
