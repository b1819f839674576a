package monitor

import "time"

// freshnessMethod is the freshness signal's method: its score is the worse
// of the p99 freshness of the window and the watermark's age.
const freshnessMethod = "p99_or_watermark_age_seconds"

// Backlog is the pipeline's backlog as the freshness signal reports it
// (pipeline.Backlog, which this package cannot import: the pipeline
// imports the monitor).
type Backlog struct {
	// Pending counts the changes fetched and not yet applied.
	Pending int
	// OldestAge is the age of the oldest of them (0: none).
	OldestAge time.Duration
	// Stage is where it is held ("source", "queued", "provider", "sink";
	// "" when nothing is pending).
	Stage string
}

// freshnessSignal is the freshness signal of one check against target:
// the score is the worse of the window's p99 freshness (what the changes
// applied since the previous check waited) and the watermark's age (how
// long ago the newest change known to be searchable with everything before
// it was committed: it grows while nothing is applied, when the p99 has
// nothing to measure); exceeded while it is over the target. No target, no
// signal.
func freshnessSignal(target time.Duration, snap MetricsSnapshot, watermarkAge float64, b Backlog) []tagged {
	if target <= 0 {
		return nil
	}
	score := max(snap.FreshnessP99Seconds, watermarkAge)
	return []tagged{{tag: TagFreshness, sig: Signal{Method: freshnessMethod, Score: score, Threshold: target.Seconds(),
		Exceeded: score > target.Seconds(), Stage: b.Stage,
		Details: map[string]float64{
			"freshness_p99_seconds":  snap.FreshnessP99Seconds,
			"watermark_age_seconds":  watermarkAge,
			"backlog_changes":        float64(b.Pending),
			"backlog_oldest_seconds": b.OldestAge.Seconds(),
		}}}}
}
