package fallback

import (
	"sync"
	"time"
)

// breakerState values are also the ragsync_frontdoor_breaker_state gauge.
type breakerState int

const (
	breakerClosed   breakerState = 0
	breakerHalfOpen breakerState = 1
	breakerOpen     breakerState = 2
)

// breaker is a consecutive-failure circuit breaker around embed + search.
// Closed: everything passes. After `threshold` failures in a row it opens and
// requests go straight to the degraded path (no retries, no dead letter: the
// answer is immediate). After `cooldown` one probe is let through
// (half-open); its success closes the breaker, its failure re-opens it.
// Safe for concurrent use.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(breakerState)

	mu       sync.Mutex
	state    breakerState
	failures int
	openedAt time.Time
	probing  bool
}

func newBreaker(threshold int, cooldown time.Duration, onChange func(breakerState)) *breaker {
	if onChange == nil {
		onChange = func(breakerState) {}
	}
	return &breaker{threshold: threshold, cooldown: cooldown, now: time.Now, onChange: onChange}
}

// Allow reports whether a request may use the real search. A true answer in
// the half-open state reserves the single probe; the caller must then report
// Success or Failure.
func (b *breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.setLocked(breakerHalfOpen)
		fallthrough
	default: // half-open
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// Success records a working search.
func (b *breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	b.probing = false
	if b.state != breakerClosed {
		b.setLocked(breakerClosed)
	}
}

// Failure records a failed embed or search.
func (b *breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	b.probing = false
	if b.state == breakerHalfOpen || (b.state == breakerClosed && b.failures >= b.threshold) {
		b.openedAt = b.now()
		b.setLocked(breakerOpen)
	}
}

// Release gives back a probe reserved by Allow that ended without a
// verdict (the answer came from another worker's search, or Redis failed):
// otherwise the half-open breaker would wait forever for its probe.
func (b *breaker) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// State returns the current state.
func (b *breaker) State() breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *breaker) setLocked(s breakerState) {
	b.state = s
	b.onChange(s)
}
