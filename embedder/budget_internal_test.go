package embedder

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/redistest"
)

// TestBudgetInstallments: a cost larger than the lane's burst is reserved
// in installments of at most the burst: the call neither fails nor waits
// for ever, it takes as long as the rate needs for the whole cost, and
// the bucket holds all of it afterwards (never counted short).
func TestBudgetInstallments(t *testing.T) {
	_, prefix := redistest.Client(t)
	b, err := newBudget(Config{RequestsPerMinute: 60, Timeout: time.Second,
		Budget: BudgetConfig{RedisURL: redistest.URL(), Prefix: prefix, Key: "k"}}.WithDefaults(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx := t.Context()
	const rate, burst, cost = 600_000, 100, 1000 // 10,000 a second: 10 installments, 9 waits of 10ms
	start := time.Now()
	require.NoError(t, b.take(ctx, b.sh.tokKey, rate, burst, cost))
	require.GreaterOrEqual(t, time.Since(start), 85*time.Millisecond, "the installments after the first wait for the rate")
	// The whole cost is in the bucket: even one more unit waits about
	// burst's worth (the last installment), not nothing.
	wait, err := b.sh.allow(ctx, b.sh.tokKey, rate, burst, burst)
	require.NoError(t, err)
	require.Greater(t, wait, 5*time.Millisecond)
	// A single allow of the whole cost at this burst is refused for ever:
	// what the installments are for.
	wait, err = b.sh.allow(ctx, b.sh.tokKey+":other", rate, burst, cost)
	require.NoError(t, err)
	require.Positive(t, wait)
}

// TestDegradedShare: while Redis is down a process keeps to the limits ÷
// the members last seen, never to nothing and never to no limit.
func TestDegradedShare(t *testing.T) {
	tests := []struct {
		name                   string
		rpm, tpm, conc, member int
		wantRPS, wantTPS       float64
		wantReqBurst, wantConc int
	}{
		{"four members", 600, 60_000, 8, 4, 150.0 / 60, 15_000.0 / 60, 2, 2},
		{"one member is the whole limit", 600, 60_000, 8, 1, 10, 1000, 10, 8},
		{"no members seen counts as one", 600, 0, 0, 0, 10, 0, 10, 0},
		{"more members than the limit", 2, 6, 2, 5, 1.0 / 60, 1.0 / 60, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDegraded(tc.rpm, tc.tpm, tc.conc, tc.member)
			require.InDelta(t, tc.wantRPS, float64(d.requests.Limit()), 1e-9)
			require.Equal(t, tc.wantReqBurst, d.requests.Burst())
			if tc.tpm > 0 {
				require.InDelta(t, tc.wantTPS, float64(d.tokens.Limit()), 1e-9)
			} else {
				require.Nil(t, d.tokens)
			}
			require.Equal(t, tc.wantConc, cap(d.slots))
		})
	}
}

// TestBudgetDegradesWhenRedisIsDown: a budget whose Redis refuses
// connections still admits, at the process's share, says "degraded", and
// logs one warning naming the redacted URL.
func TestBudgetDegradesWhenRedisIsDown(t *testing.T) {
	var logs logRecorder
	b, err := newBudget(Config{RequestsPerMinute: 600, Timeout: time.Second,
		Budget: BudgetConfig{RedisURL: "redis://:s3cret@127.0.0.1:1/0"}}.WithDefaults(), slog.New(&logs))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	for range 30 {
		release, _, err := b.admit(ctx, LaneLive, 1, false)
		require.NoError(t, err)
		release()
	}
	// 10 a second with a burst of 10: 30 take about 2 s, not nothing.
	require.Greater(t, time.Since(start), 1500*time.Millisecond)
	require.Equal(t, BudgetDegraded, b.status().Mode)
	require.Len(t, logs.msgs, 1)
	require.Contains(t, logs.msgs[0], "Redis is unreachable")
	require.NotContains(t, logs.msgs[0], "s3cret")
	require.Contains(t, logs.msgs[0], "127.0.0.1:1")
}

// logRecorder keeps each record's message and attributes as one string.
type logRecorder struct{ msgs []string }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.msgs = append(l.msgs, s)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// TestLeasesOfAKilledProcessComeBack: a slot whose holder never released
// it (a killed process) is free again once its lease ends.
func TestLeasesOfAKilledProcessComeBack(t *testing.T) {
	_, prefix := redistest.Client(t)
	b, err := newBudget(Config{Timeout: time.Second, Budget: BudgetConfig{RedisURL: redistest.URL(), Prefix: prefix, Key: "k", MaxConcurrency: 1}}.WithDefaults(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx := t.Context()
	ok, err := b.sh.acquire(ctx, LaneLive, "killed", 1, 1, 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.sh.acquire(ctx, LaneLive, "other", 1, 1, 200*time.Millisecond)
	require.NoError(t, err)
	require.False(t, ok, "the one slot is held")
	time.Sleep(250 * time.Millisecond)
	ok, err = b.sh.acquire(ctx, LaneLive, "other", 1, 1, 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok, "the killed holder's lease ended")
}
