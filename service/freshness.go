package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
)

// FreshnessConfig is freshness: in ragsync.yaml.
type FreshnessConfig struct {
	// Target is freshness.target: the monitor's freshness signal compares
	// with it (0: no target, no signal).
	Target time.Duration
	// DegradedAfter is freshness.degraded_after with its default: /readyz
	// answers degraded while the oldest change fetched and not yet applied
	// is older (0: never).
	DegradedAfter time.Duration
}

// freshnessGate tells /readyz when the pipeline's backlog is older than
// freshness.degraded_after, and logs once when it degrades and once when
// it recovers, whoever notices first: a probe or the watch loop, which
// notices without probes.
type freshnessGate struct {
	after   time.Duration
	backlog func() pipeline.Backlog
	logger  *slog.Logger

	mu       sync.Mutex
	degraded bool
}

// check returns "" while the backlog is younger than the bound, else what
// /readyz says after "degraded: ": the backlog, the stage holding its
// oldest change and what to check for it.
func (g *freshnessGate) check(ctx context.Context) string {
	if g == nil || g.after <= 0 {
		return ""
	}
	b := g.backlog()
	bad := b.OldestAge > g.after
	g.mu.Lock()
	flipped := bad != g.degraded
	g.degraded = bad
	g.mu.Unlock()
	msg := ""
	if bad {
		msg = degradedMessage(b, g.after)
	}
	switch {
	case flipped && bad:
		g.logger.WarnContext(ctx, "readyz: degraded: the oldest pending change is older than freshness.degraded_after",
			"pending", b.Pending, "oldest_age", b.OldestAge.Round(time.Millisecond).String(), "held_by", b.Stage,
			"check", b.Check, "degraded_after", g.after.String())
	case flipped:
		g.logger.InfoContext(ctx, "readyz: no longer degraded: the backlog is within freshness.degraded_after",
			"pending", b.Pending, "oldest_age", b.OldestAge.Round(time.Millisecond).String(), "degraded_after", g.after.String())
	}
	return msg
}

// degradedMessage is the body of a degraded /readyz after "degraded: ".
func degradedMessage(b pipeline.Backlog, after time.Duration) string {
	msg := fmt.Sprintf("%d changes pending, the oldest %s old (over freshness.degraded_after %s), held by the %s stage",
		b.Pending, b.OldestAge.Round(time.Second), after, b.Stage)
	if b.Check != "" {
		msg += "; check " + b.Check
	}
	return msg
}

// watch checks every second until ctx ends, so that a backlog that
// degrades and recovers between probes (or without any) is logged.
func (g *freshnessGate) watch(ctx context.Context) {
	if g == nil || g.after <= 0 {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.check(ctx)
		}
	}
}

// monitorBacklog is the pipeline's backlog as the monitor reports it.
func monitorBacklog(p *pipeline.Pipeline) monitor.Backlog {
	b := p.Backlog()
	return monitor.Backlog{Pending: b.Pending, OldestAge: b.OldestAge, Stage: b.Stage}
}
