package pipeline

import (
	"context"
	"fmt"
)

// acknowledge calls, until stop is closed, the acknowledgements of the
// batches that became complete: in fetch order within each lane, each after
// the commit hook. A failure to acknowledge stops the flow.
func (f *flow) acknowledge(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-f.ackable:
		}
		if err := f.ackReady(f.ctx, true); err != nil {
			if f.ctx.Err() == nil {
				f.fail(err)
			}
			return
		}
	}
}

// ackReady acknowledges every batch complete at the head of its lane. With
// retry, failures are retried as the pipeline retries any step (a broker
// that is down stops progress rather than losing it).
func (f *flow) ackReady(ctx context.Context, retry bool) error {
	p := f.p
	run := func(stage string, fn func() error) error {
		if retry {
			return p.retry(ctx, stage, fn)
		}
		return fn()
	}
	acked := false
	defer func() {
		if acked && p.marks != nil {
			// What was acknowledged is committed: the watermark may
			// move (written beside the acknowledgements, never holding
			// them up; see tickMarks).
			signal(p.marks.dirty)
		}
	}()
	for {
		_, before := f.oldestFetched()
		ready := f.takeAckable()
		if len(ready) == 0 {
			return nil
		}
		if err := run("ack", func() error { return p.flush(ctx) }); err != nil {
			return fmt.Errorf("commit before acknowledging: %w", err)
		}
		for _, t := range ready {
			if t.ack != nil {
				if err := run("ack", func() error { return t.ack(ctx) }); err != nil {
					return fmt.Errorf("ack batch: %w", err)
				}
			}
			p.metrics.batchSecs.Observe(p.now().Sub(t.fetched).Seconds())
		}
		f.acknowledged()
		acked = true
		if _, after := f.oldestFetched(); after != before {
			// The oldest batch moved on: retries and failures noted so far
			// belonged to it, and the stall check starts over.
			p.batchRetries.Store(0)
			p.failing.clear()
		}
	}
}
