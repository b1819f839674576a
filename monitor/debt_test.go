package monitor_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// TestDebtPastWindowIsAnAlarm: reuse debt older than the repayment window
// (the repayment could not keep up) is a fidelity signal in alarm, with the
// outstanding vectors and tokens; debt within the window is not.
func TestDebtPastWindowIsAnAlarm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	origin := "the quick brown fox jumps over the lazy dog near the river bank"
	edited := "the quick brown fox jumps over the lazy dog near the river"
	b.upsert(t, "origin", 1, origin)
	now := time.Now()
	d := sink.Document{Table: "public.docs", Key: "reuser", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}},
		Chunks: []sink.Chunk{{Position: 0, Hash: chunker.Hash(edited), Text: edited, Tokens: chunker.CountTokens(edited),
			VectorHash: chunker.Hash(origin), DebtSince: now.Add(-10 * time.Minute), DebtDistance: 0.01}}}
	_, err := b.st.Upsert(ctx, d)
	require.NoError(t, err)
	for _, tc := range []struct {
		window   time.Duration
		exceeded bool
	}{{time.Hour, false}, {5 * time.Minute, true}} {
		m, err := monitor.New(t.Context(), monitor.Config{SampleSize: -1, Logger: slog.New(slog.DiscardHandler)},
			monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb, Debt: b.st, DebtWindow: tc.window,
				Now: func() time.Time { return now }})
		require.NoError(t, err)
		st, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true, NoSave: true})
		require.NoError(t, err)
		require.NotNil(t, st.Debt)
		require.Equal(t, 1, st.Debt.Vectors)
		require.EqualValues(t, chunker.CountTokens(edited), st.Debt.Tokens)
		require.InDelta(t, 600, st.Debt.OldestAgeSeconds, 1)
		var sig *monitor.Signal
		for _, e := range st.Events {
			if e.Signal.Method == "reuse_debt_oldest_age_seconds" {
				sig = &e.Signal
			}
		}
		require.NotNil(t, sig, "window %s: no debt signal", tc.window)
		require.Equal(t, tc.exceeded, sig.Exceeded, "window %s", tc.window)
		require.Equal(t, tc.exceeded, st.Breach, "window %s", tc.window)
	}
}
