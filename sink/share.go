package sink

import (
	"context"
	"slices"
	"sync"
)

// sharing lets concurrent callers share one piece of work, the way
// Postgres's group commit shares a WAL flush: a caller queues its request
// and either waits for its result or, when one of the slots is free, takes
// every queued request (up to max) and runs them together. A request alone
// runs alone, so a quiet caller waits for nothing; under load the requests
// that queued while the slots were busy go together. Upsert shares
// transactions through it (groupCommit), Lookup round trips (lookupGroup).
type sharing[R comparable] struct {
	// slots caps the groups running at once.
	slots chan struct{}
	max   int
	// key, when set, keeps two requests of one key out of one group: the
	// later waits for a later group, so one key's requests run in order.
	key func(R) string

	mu    sync.Mutex
	queue []R
}

func newSharing[R comparable](slots, max int, key func(R) string) *sharing[R] {
	if slots < 1 || max < 2 {
		return nil
	}
	return &sharing[R]{slots: make(chan struct{}, slots), max: max, key: key}
}

// join queues r and returns once done is closed (run, by this caller or
// another, completes r and closes its done), taking turns at running
// groups while r waits. It returns false, without waiting, when ctx ends
// while r is still queued: r then never runs.
func (g *sharing[R]) join(ctx context.Context, r R, done <-chan struct{}, run func(context.Context, []R)) bool {
	g.mu.Lock()
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	for {
		select {
		case <-done:
			return true
		case g.slots <- struct{}{}:
			batch, waiting := g.take(r)
			if len(batch) > 0 {
				run(ctx, batch)
			}
			<-g.slots
			if !waiting {
				// r ran in this group or runs in one that took it
				// earlier: wait for it, without taking slots again.
				<-done
				return true
			}
		case <-ctx.Done():
			if g.remove(r) {
				return false
			}
			<-done // taken by a group already: its result is on its way
			return true
		}
	}
}

// take removes and returns the queued requests of the next group, oldest
// first, at most max (and one per key), and reports whether mine is still
// queued after it.
func (g *sharing[R]) take(mine R) (batch []R, waiting bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kept := g.queue[:0]
	var in map[string]bool
	if g.key != nil {
		in = make(map[string]bool, min(len(g.queue), g.max))
	}
	for _, r := range g.queue {
		if len(batch) < g.max && (g.key == nil || !in[g.key(r)]) {
			if g.key != nil {
				in[g.key(r)] = true
			}
			batch = append(batch, r)
			continue
		}
		kept = append(kept, r)
	}
	clear(g.queue[len(kept):])
	g.queue = kept
	return batch, slices.Contains(kept, mine)
}

// remove takes r out of the queue; false if a group took it already.
func (g *sharing[R]) remove(r R) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.Index(g.queue, r); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		return true
	}
	return false
}

// queued is how many requests wait (for tests).
func (g *sharing[R]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
