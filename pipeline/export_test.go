package pipeline

import "time"

// SetClock replaces the pipeline's clock, for stall tests.
func SetClock(p *Pipeline, now func() time.Time) { p.now = now }
