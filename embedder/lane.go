package embedder

import "context"

// Lane is the priority of an embedding request in the provider budget that
// the processes sharing one API key draw from: a lower lane may only use
// what higher lanes leave (see BudgetConfig.Shares).
type Lane uint8

const (
	// LaneLive is serve's own changes: first.
	LaneLive Lane = iota
	// LaneDebt is the repayment of reuse debt: second.
	LaneDebt
	// LaneBackfill is backfill, reindex and repair: last.
	LaneBackfill
)

// lanes lists every lane, highest first.
var lanes = [...]Lane{LaneLive, LaneDebt, LaneBackfill}

// String returns "live", "debt" or "backfill" (the metrics' lane label).
func (l Lane) String() string {
	switch l {
	case LaneLive:
		return "live"
	case LaneDebt:
		return "debt"
	case LaneBackfill:
		return "backfill"
	}
	return "unknown"
}

type laneKey struct{}

// WithLane returns ctx carrying lane l: embedding calls made with it are
// admitted in that lane, whatever Config.Lane says.
func WithLane(ctx context.Context, l Lane) context.Context {
	return context.WithValue(ctx, laneKey{}, l)
}

// LaneFrom returns the lane ctx carries, and whether it carries one.
func LaneFrom(ctx context.Context) (Lane, bool) {
	l, ok := ctx.Value(laneKey{}).(Lane)
	return l, ok
}

// laneOr returns ctx's lane, or def when it carries none; a value past
// the last lane counts as the last.
func laneOr(ctx context.Context, def Lane) Lane {
	if l, ok := LaneFrom(ctx); ok {
		def = l
	}
	return min(def, LaneBackfill)
}
