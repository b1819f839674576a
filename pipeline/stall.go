package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Stages named in the stall summary and keyed in Config.Settings.
const (
	StageEmbedder    = "embedder"
	StageSink        = "sink"
	StageDeadLetters = "dead_letters"
	StageSource      = "source"
)

// stageError marks which dependency a failure came from, for the stall
// summary; it is transparent to errors.Is/As and prints as its cause.
type stageError struct {
	stage string
	err   error
}

func (e stageError) Error() string { return e.err.Error() }
func (e stageError) Unwrap() error { return e.err }

// stageOf names the dependency behind a failure retried at step (the
// argument of retry): apply fails in the embedder or the sink, ack in the
// source, dead_letter in the dead-letter destination.
func stageOf(step string, err error) string {
	var se stageError
	switch {
	case errors.As(err, &se):
		return se.stage
	case step == "ack":
		return StageSource
	case step == "dead_letter":
		return StageDeadLetters
	default:
		return StageSink
	}
}

// failureNote remembers the first and latest retried failure of the batch
// in flight.
type failureNote struct {
	mu    sync.Mutex
	since time.Time
	stage string
	err   error
}

func (f *failureNote) note(stage string, err error, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		f.since = now
	}
	f.stage, f.err = stage, err
}

func (f *failureNote) clear() {
	f.mu.Lock()
	f.since, f.stage, f.err = time.Time{}, "", nil
	f.mu.Unlock()
}

func (f *failureNote) get() (time.Time, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since, f.stage, f.err
}

// summariseStalls logs, every StallLogInterval while the batch in flight is
// being retried, one line saying what fails and what to do: retries of a
// dependency that is down go on without limit by design, and without this
// the log falls silent between the sparse retry warnings, which looks like
// a hang. The returned func stops it and waits for it.
func (p *Pipeline) summariseStalls(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(p.cfg.StallLogInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.logStall(ctx)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// logStall writes the stall summary if the batch in flight needed retries.
func (p *Pipeline) logStall(ctx context.Context) {
	since, stage, err := p.failing.get()
	if err == nil || p.oldestBatch().IsZero() || p.batchRetries.Load() == 0 {
		return
	}
	readyz := "ok until " + p.stallDeadline().Format(time.RFC3339) + " (pipeline.stall_after)"
	if !p.Healthy() {
		readyz = "failing: the oldest unacknowledged batch has been retried longer than pipeline.stall_after"
	}
	args := []any{"failing", stage, "error", err.Error(), "since", since.Format(time.RFC3339),
		"for", p.now().Sub(since).Round(time.Second).String(), "retries", p.batchRetries.Load(), "readyz", readyz}
	if s := p.cfg.Settings[stage]; s != "" {
		args = append(args, "check", s)
	}
	p.log.WarnContext(ctx, "pipeline stalled: retrying until the dependency recovers; nothing is fetched or committed meanwhile", args...)
}

// stallDeadline is when Healthy turns false if the batch in flight keeps
// failing.
func (p *Pipeline) stallDeadline() time.Time {
	return p.oldestBatch().Add(p.cfg.StallAfter)
}
