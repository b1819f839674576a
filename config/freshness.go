package config

import (
	"errors"
	"fmt"
	"time"
)

// FreshnessConfig is freshness: the freshness the index is expected to
// keep (time from a change's commit in the source to its being searchable)
// and when serve's /readyz reports it degraded.
type FreshnessConfig struct {
	// Target is the freshness declared for the index, e.g. 2s. With it,
	// every monitor check emits a "freshness" signal, exceeded while the
	// p99 freshness of the changes applied since the previous check, or
	// the age of the watermark, is over it. 0 (the default): no target,
	// no signal.
	Target time.Duration `yaml:"target"`
	// DegradedAfter is how old the oldest change fetched and not yet
	// applied may get before /readyz answers 503 "degraded: …" with the
	// backlog and the stage holding it. 0 means the default: 3 × Target
	// when a target is set (a backlog that old has missed the target by
	// far, not by a blip), else never. Without a declared target, an old
	// backlog is not a fault: a replay of old events, or a new consumer
	// group reading a topic from its start, holds changes committed hours
	// or days ago, and a readiness probe failing through the catch-up
	// would hold up every rollout behind it.
	DegradedAfter time.Duration `yaml:"degraded_after"`
}

// Degraded is freshness.degraded_after with its default; 0: never.
func (f FreshnessConfig) Degraded() time.Duration {
	switch {
	case f.DegradedAfter > 0:
		return f.DegradedAfter
	case f.Target > 0:
		return 3 * f.Target
	}
	return 0
}

// validate checks the freshness: section, naming each field and its fix.
func (f FreshnessConfig) validate() error {
	var errs []error
	if f.Target < 0 {
		errs = append(errs, fmt.Errorf("freshness.target: %s must not be negative; set the freshness the index must keep, e.g. 2s (0 or unset: no target)", f.Target))
	}
	if f.DegradedAfter < 0 {
		errs = append(errs, fmt.Errorf("freshness.degraded_after: %s must not be negative; set how old the oldest pending change may get before /readyz answers degraded, e.g. 1m (0 or unset: 3 × freshness.target, or never without a target)", f.DegradedAfter))
	}
	return errors.Join(errs...)
}
