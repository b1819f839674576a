package monitor_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/monitor"
)

// A monitor that is not serve's (BaselineBy empty: ragsync monitor,
// fidelity check) never stores a canary baseline; TakeBaselines does, says
// who took them, and --reset replaces them with the current embedder's.
func TestCanaryBaselinesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	canaries := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM monitor_canaries").Scan(&n))
		return n
	}
	cfg := monitor.Config{SampleSize: -1, Canaries: []string{"first probe text", "second probe text"},
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ro, err := monitor.New(t.Context(), cfg, monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb})
	require.NoError(t, err)
	st, err := ro.Check(t.Context(), monitor.CheckOptions{NoPublish: true, NoSave: true})
	require.NoError(t, err)
	require.Zero(t, canaries(), "a read-only check stored baselines")
	require.Equal(t, monitor.Baselines{Missing: 2}, st.Baselines)

	n, err := ro.TakeBaselines(t.Context(), false, "monitor baseline")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err := ro.Baselines(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, got.Probes)
	require.Equal(t, []string{"monitor baseline"}, got.TakenBy)

	// serve's monitor finds them and adds none; a reset retakes both.
	sv := b.monitor(t, cfg)
	st, err = sv.Check(t.Context(), monitor.CheckOptions{NoPublish: true, NoSave: true})
	require.NoError(t, err)
	require.Equal(t, []string{"monitor baseline"}, st.Baselines.TakenBy)
	n, err = sv.TakeBaselines(t.Context(), true, "serve")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err = sv.Baselines(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"serve"}, got.TakenBy)
	require.Equal(t, 2, canaries())
}
