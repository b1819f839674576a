package pipeline

import (
	"fmt"
	"sync"
)

// dlqGuard keeps the outcome of the last Window messages and trips when more
// than MaxRatio of them were dead-lettered: an error every message hits
// (a broken upstream, a schema change, a lost privilege not classified as
// fatal) must stop the pipeline instead of draining the topic into the
// dead-letter destination. After Conduit's DLQ window
// (WindowSize/WindowNackThreshold) and Kafka Connect's errors.tolerance.
type dlqGuard struct {
	window   int
	maxRatio float64

	mu      sync.Mutex
	ring    []bool // true: dead-lettered
	next    int    // where the next outcome goes
	filled  int    // outcomes recorded, up to window
	dead    int    // dead letters in the ring
	tripped error  // set once; the pipeline stops with it
}

func newDLQGuard(window int, maxRatio float64) *dlqGuard {
	return &dlqGuard{window: window, maxRatio: maxRatio, ring: make([]bool, window)}
}

// ok records a message that was applied or skipped.
func (g *dlqGuard) ok() { g.record(false) }

// deadLetter records a message about to be dead-lettered and returns a
// non-nil error, instead of recording it, if that would put the window
// over the limit. The error is kept: Err returns it from then on.
func (g *dlqGuard) deadLetter(cause error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tripped != nil {
		return g.tripped
	}
	dead := g.dead + 1
	if g.filled == g.window && g.ring[g.next] {
		dead-- // the oldest outcome, a dead letter, leaves the window
	}
	if float64(dead) > g.maxRatio*float64(g.window) {
		g.tripped = fmt.Errorf("dead-letter guard: %d of the last %d messages would be dead-lettered, over pipeline.dead_letter_max_ratio %.2g of pipeline.dead_letter_window %d: "+
			"stopping instead of draining the topic into the dead-letter destination (offsets of this batch are not committed). "+
			"Fix the cause, then restart; `ragsync dlq list` shows the reasons. Last error: %w",
			dead, min(g.filled+1, g.window), g.maxRatio, g.window, cause)
		return g.tripped
	}
	g.put(true)
	return nil
}

func (g *dlqGuard) record(dead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.put(dead)
}

func (g *dlqGuard) put(dead bool) {
	if g.filled == g.window {
		if g.ring[g.next] {
			g.dead--
		}
	} else {
		g.filled++
	}
	g.ring[g.next] = dead
	if dead {
		g.dead++
	}
	g.next = (g.next + 1) % g.window
}

// Err returns the error the guard tripped with, nil while it has not.
func (g *dlqGuard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tripped
}

// ratio is the share of the window dead-lettered so far, for the metric.
func (g *dlqGuard) ratio() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return float64(g.dead) / float64(g.window)
}
