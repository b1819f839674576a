package monitor

import (
	"context"
	"fmt"
	"time"

	"github.com/ragsync/ragsync/sink"
)

// DebtSource reports an index's outstanding reuse debt (sink.Store has it).
type DebtSource interface {
	OutstandingDebt(ctx context.Context, due time.Time) (sink.DebtSummary, error)
}

// DebtStatus is the reuse debt at a check: chunks standing on a reused
// vector, the tokens it takes to repay them, and how old the oldest is
// against the repayment window.
type DebtStatus struct {
	Vectors          int     `json:"vectors"`
	Tokens           int64   `json:"tokens"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	WindowSeconds    float64 `json:"window_seconds"`
	// RepaidTokens is what serve's repayment has sent so far (serve's
	// ragsync_pipeline_debt_repaid_tokens_total); -1 when the check runs
	// outside serve.
	RepaidTokens float64 `json:"repaid_tokens"`
}

// checkDebt reads the outstanding reuse debt. Debt older than the window
// means the repayment cannot keep up (its hourly cap, or a pipeline that
// never leaves the embedder idle): the signal says so.
func (m *Monitor) checkDebt(ctx context.Context, now time.Time) (*DebtStatus, []tagged, error) {
	if m.deps.Debt == nil {
		return nil, nil, nil
	}
	window := m.deps.DebtWindow
	if window <= 0 {
		window = 5 * time.Minute
	}
	sum, err := m.deps.Debt.OutstandingDebt(ctx, now.Add(-window))
	if err != nil {
		return nil, nil, fmt.Errorf("read reuse debt: %w", err)
	}
	st := &DebtStatus{Vectors: sum.Vectors, Tokens: sum.Tokens, WindowSeconds: window.Seconds(), RepaidTokens: -1}
	if !sum.Oldest.IsZero() {
		st.OldestAgeSeconds = max(now.Sub(sum.Oldest).Seconds(), 0)
	}
	if m.deps.Gatherer != nil {
		if mfs, err := m.deps.Gatherer.Gather(); err == nil {
			for _, mf := range mfs {
				if mf.GetName() == "ragsync_pipeline_debt_repaid_tokens_total" && len(mf.GetMetric()) > 0 {
					st.RepaidTokens = mf.GetMetric()[0].GetCounter().GetValue()
				}
			}
		}
	}
	sig := Signal{Method: "reuse_debt_oldest_age_seconds", Score: st.OldestAgeSeconds, Threshold: st.WindowSeconds,
		Exceeded: st.OldestAgeSeconds > st.WindowSeconds,
		Details: map[string]float64{"vectors": float64(st.Vectors), "tokens": float64(st.Tokens),
			"past_window_vectors": float64(sum.DueVectors), "repaid_tokens": st.RepaidTokens}}
	return st, []tagged{{tag: TagFidelity, sig: sig}}, nil
}
