package pipeline

import "time"

// SetClock replaces the pipeline's clock, for stall tests.
func SetClock(p *Pipeline, now func() time.Time) { p.now = now }

// ShadowSwapPending reports whether a SetShadows call waits for the batch
// in flight: a pending writer makes TryRLock fail.
func ShadowSwapPending(p *Pipeline) bool {
	if p.shadowMu.TryRLock() {
		p.shadowMu.RUnlock()
		return false
	}
	return true
}

// DocumentCost is what the flow charges to the bytes in flight per
// document being applied.
const DocumentCost = documentCost
