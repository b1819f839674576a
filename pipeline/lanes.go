package pipeline

import (
	"context"
	"sync/atomic"
	"time"
)

// Lanes shares one embedder between live changes and background work (the
// repayment of reuse debt) so that live changes always go first: a call on
// the background lane waits until no live call is in flight and none has
// ended for the quiet time. Live calls never wait for the background. A
// quiet time longer than the gaps between live calls starves the
// background under a steady stream, so serve uses none: the background
// goes in the gaps.
type Lanes struct {
	e     Embedder
	quiet time.Duration
	poll  time.Duration
	live  atomic.Int64
	last  atomic.Int64 // UnixNano when the last live call ended
}

// NewLanes wraps e; a background call waits for quiet after the last live
// call (0: only for the live calls in flight).
func NewLanes(e Embedder, quiet time.Duration) *Lanes {
	return &Lanes{e: e, quiet: max(quiet, 0), poll: 5 * time.Millisecond}
}

// Live is the lane of the pipeline's own changes.
func (l *Lanes) Live() Embedder { return liveLane{l} }

// Background is the lane of work that yields to live changes.
func (l *Lanes) Background() Embedder { return backgroundLane{l} }

type liveLane struct{ l *Lanes }

func (ll liveLane) enter() func() {
	ll.l.live.Add(1)
	return func() {
		ll.l.last.Store(time.Now().UnixNano())
		ll.l.live.Add(-1)
	}
}

func (ll liveLane) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	defer ll.enter()()
	return ll.l.e.Embed(ctx, texts)
}

func (ll liveLane) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	defer ll.enter()()
	return ll.l.e.EmbedCounted(ctx, texts, tokens)
}

// ReportedModel is the wrapped embedder's.
func (ll liveLane) ReportedModel() string { return ll.l.e.ReportedModel() }

type backgroundLane struct{ l *Lanes }

// ReportedModel is the wrapped embedder's.
func (bl backgroundLane) ReportedModel() string { return bl.l.e.ReportedModel() }

func (bl backgroundLane) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if err := bl.l.wait(ctx); err != nil {
		return nil, err
	}
	return bl.l.e.Embed(ctx, texts)
}

func (bl backgroundLane) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if err := bl.l.wait(ctx); err != nil {
		return nil, err
	}
	return bl.l.e.EmbedCounted(ctx, texts, tokens)
}

// Wait returns once the live lane is idle, or ctx's error: background work
// calls it before anything else that competes with live changes (the
// repayment's writes, DebtConfig.Yield).
func (l *Lanes) Wait(ctx context.Context) error { return l.wait(ctx) }

func (l *Lanes) wait(ctx context.Context) error {
	for {
		if l.live.Load() == 0 && time.Since(time.Unix(0, l.last.Load())) >= l.quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.poll):
		}
	}
}
