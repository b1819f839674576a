package embedder

import (
	"context"
	"time"
)

// SetSleep replaces the wait between attempts, so tests can record the
// waits the client chose without spending them.
func SetSleep(o *OpenAI, f func(ctx context.Context, d time.Duration) error) { o.sleep = f }

// SetBudgetClock offsets the clock the budget reads for its local
// deadlines, as a process whose clock is wrong would.
func SetBudgetClock(o *OpenAI, now func() time.Time) { o.budget.now = now }
