package service

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// TestProviderBudgetForTheMonitor: the monitor judges the live lane's
// wait and 429s, the fleet's use of the key's limits from every lane's
// requests and tokens, and the limits are the embedder's.
func TestProviderBudgetForTheMonitor(t *testing.T) {
	b := embedder.BudgetStatus{Mode: embedder.BudgetShared, Members: 3, Lanes: map[embedder.Lane]embedder.LaneStats{
		embedder.LaneLive:     {Requests: 10, Tokens: 100, Wait: time.Second, Throttled: 1},
		embedder.LaneBackfill: {Requests: 5, Tokens: 50, Wait: time.Minute, Throttled: 2},
	}}
	got := providerBudget(b, embedder.Config{RequestsPerMinute: 600, TokensPerMinute: 9000})
	want := monitor.ProviderBudget{Mode: "shared", Members: 3, RequestsPerMinute: 600, TokensPerMinute: 9000,
		Live: monitor.BudgetLane{Requests: 10, Tokens: 100, Wait: time.Second, Throttled: 1},
		All:  monitor.BudgetLane{Requests: 15, Tokens: 150, Wait: time.Minute + time.Second, Throttled: 3}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("providerBudget (-want +got):\n%s", d)
	}
}

// TestServesMonitorReadsTheBudget: the index's remote embedder hands its
// budget to serve's monitor (which then reports it from its second check,
// the first window's end), and not to a monitor command's, whose own
// client says nothing of the fleet.
func TestServesMonitorReadsTheBudget(t *testing.T) {
	ctx := t.Context()
	srv := openaitest.New(t, openaitest.Options{})
	_, schema := pgtest.Schema(t)
	logger := slog.New(slog.DiscardHandler)
	ix, err := Open(ctx, IndexConfig{URL: pgtest.URL(), Schema: schema, Index: "docs",
		Embedder: embedder.Config{Provider: "openai", BaseURL: srv.URL, Model: "m", Dimensions: 16, RequestsPerMinute: 600}.WithDefaults()},
		sink.Write, logger, nil)
	require.NoError(t, err)
	t.Cleanup(ix.Close)
	t.Cleanup(ix.Emb.(*embedder.OpenAI).Close)
	require.NotNil(t, ix.budget, "a remote embedder has a budget")

	for _, publish := range []bool{true, false} {
		w, err := newMonitor(ctx, MonitorConfig{Config: monitor.Config{SampleSize: -1}}, ix, nil, nil, nil, nil, logger, publish)
		require.NoError(t, err)
		t.Cleanup(w.Close)
		var st monitor.Status
		for range 2 {
			st, err = w.m.Check(ctx, monitor.CheckOptions{NoSave: true})
			require.NoError(t, err)
		}
		if !publish {
			require.Nil(t, st.Budget, "a monitor command does not judge the fleet by its own client")
			continue
		}
		require.NotNil(t, st.Budget)
		require.Equal(t, embedder.BudgetLocal, st.Budget.Mode)
		require.False(t, st.Budget.Bound)
	}
}

// laneRecorder records the budget lane each call's context carries.
type laneRecorder struct{ lanes []string }

func (r *laneRecorder) record(ctx context.Context) {
	name := "none"
	if l, ok := embedder.LaneFrom(ctx); ok {
		name = l.String()
	}
	r.lanes = append(r.lanes, name)
}

func (r *laneRecorder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	r.record(ctx)
	return make([][]float32, len(texts)), nil
}

func (r *laneRecorder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return r.Embed(ctx, texts)
}

func (r *laneRecorder) ReportedModel() string { return "" }

// TestDebtLaneTagsTheBudgetLane: serve's repayment of reuse debt reaches
// the provider budget in the debt lane, through pipeline.Lanes' background
// lane; live calls keep the embedder's own (no lane named).
func TestDebtLaneTagsTheBudgetLane(t *testing.T) {
	r := &laneRecorder{}
	l := pipeline.NewLanes(r, 0)
	_, err := l.Live().Embed(t.Context(), []string{"a"})
	require.NoError(t, err)
	d := debtLane{l.Background()}
	_, err = d.Embed(t.Context(), []string{"b"})
	require.NoError(t, err)
	_, err = d.EmbedCounted(t.Context(), []string{"c"}, []int{1})
	require.NoError(t, err)
	require.Equal(t, []string{"none", "debt", "debt"}, r.lanes)
}
