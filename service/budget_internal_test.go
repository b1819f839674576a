package service

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/monitor"
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
