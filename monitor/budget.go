package monitor

import (
	"sync"
	"time"
)

// budget is a token bucket of max tokens refilled evenly over an hour: the
// sampler's spend is bounded by monitor.max_tokens_per_hour over any hour,
// and a quiet hour does not bank more than one hour's worth.
type budget struct {
	mu    sync.Mutex
	max   float64
	left  float64
	at    time.Time
	now   func() time.Time
	spent int64
}

func newBudget(perHour int, now func() time.Time) *budget {
	return &budget{max: float64(perHour), left: float64(perHour), at: now(), now: now}
}

func (b *budget) refill() {
	t := b.now()
	b.left = min(b.max, b.left+b.max*t.Sub(b.at).Hours())
	b.at = t
}

// take spends n tokens if they are available.
func (b *budget) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if float64(n) > b.left {
		return false
	}
	b.left -= float64(n)
	b.spent += int64(n)
	return true
}

// remaining is what can be spent now.
func (b *budget) remaining() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	return b.left
}
