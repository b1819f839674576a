package monitor

import (
	"fmt"
	"time"
)

// DefaultBudgetBoundShare is Config.BudgetBoundShare's default.
const DefaultBudgetBoundShare = 0.25

// ProviderBudget is what the embedding client reports of the provider
// budget it draws on (embedder.BudgetStatus, read by the service): counters
// since the process started, which the monitor turns into rates over each
// check's window.
type ProviderBudget struct {
	// Mode is "none" (no limits), "local" (per process), "shared" (one
	// budget in Redis for every process using the key) or "degraded"
	// (Redis configured but unreachable).
	Mode string
	// Members is the number of processes seen sharing the key (>= 1).
	Members int
	// Live is the live lane (serve's own changes); All sums every lane.
	Live, All BudgetLane
	// RequestsPerMinute and TokensPerMinute are the key's limits
	// (embedder.requests_per_minute and tokens_per_minute; 0: none).
	RequestsPerMinute, TokensPerMinute int
}

// BudgetLane is one lane's counters since the process started.
type BudgetLane struct {
	// Requests and Tokens the budget admitted.
	Requests, Tokens int64
	// Wait is the total time the lane's requests waited for the budget
	// (summed over requests waiting at once).
	Wait time.Duration
	// Throttled counts the provider's 429s in the lane.
	Throttled int64
}

// BudgetStatus is the provider budget over one check's window.
type BudgetStatus struct {
	Mode    string `json:"mode"`
	Members int    `json:"members"`
	// LiveWaitShare is the live lane's time waiting for the budget per
	// second of the window: 0.5 means that on average half a live request
	// was waiting at any time.
	LiveWaitShare float64 `json:"live_wait_share"`
	// LiveThrottled counts the live lane's 429s in the window.
	LiveThrottled int64 `json:"live_throttled"`
	// RequestsUse and TokensUse estimate the fleet's share of each limit
	// used in the window (this process's rate times Members over the
	// limit); 0 when the limit is not set.
	RequestsUse float64 `json:"requests_use"`
	TokensUse   float64 `json:"tokens_use"`
	// Bound says the fleet was budget-bound in the window: the live lane
	// waited for the budget at least monitor.budget_bound_share of it, or
	// was throttled.
	Bound bool `json:"bound"`
	// Binds names what binds when Bound: requests_per_minute,
	// tokens_per_minute, max_concurrency (no rate limit set: the fleet's
	// concurrency bound), or provider (429s with no limit configured: the
	// key's real limits are lower than the configuration knows).
	Binds string `json:"binds,omitempty"`
	// Fix says what helps when Bound: more replicas do not.
	Fix string `json:"fix,omitempty"`
}

// budgetTracker keeps the previous reading to turn counters into rates.
type budgetTracker struct {
	prev   ProviderBudget
	prevAt time.Time
	seen   bool
}

// observe returns the budget's status over the window since the previous
// call, judged against share (monitor.budget_bound_share). The first call
// only records its reading: a window needs two ends.
func (b *budgetTracker) observe(now time.Time, cur ProviderBudget, share float64) (BudgetStatus, bool) {
	prev, prevAt, seen := b.prev, b.prevAt, b.seen
	b.prev, b.prevAt, b.seen = cur, now, true
	dt := now.Sub(prevAt).Seconds()
	if !seen || dt <= 0 {
		return BudgetStatus{}, false
	}
	st := BudgetStatus{Mode: cur.Mode, Members: max(cur.Members, 1)}
	// A counter that went back (the client was rebuilt) counts from zero.
	delta := func(c, p int64) int64 {
		if c < p {
			return c
		}
		return c - p
	}
	wait := cur.Live.Wait - prev.Live.Wait
	if wait < 0 {
		wait = cur.Live.Wait
	}
	st.LiveWaitShare = wait.Seconds() / dt
	st.LiveThrottled = delta(cur.Live.Throttled, prev.Live.Throttled)
	perMinute := func(n int64) float64 { return float64(n) / dt * 60 * float64(st.Members) }
	if cur.RequestsPerMinute > 0 {
		st.RequestsUse = perMinute(delta(cur.All.Requests, prev.All.Requests)) / float64(cur.RequestsPerMinute)
	}
	if cur.TokensPerMinute > 0 {
		st.TokensUse = perMinute(delta(cur.All.Tokens, prev.All.Tokens)) / float64(cur.TokensPerMinute)
	}
	st.Bound = st.LiveWaitShare >= share || st.LiveThrottled > 0
	if st.Bound {
		st.Binds, st.Fix = binding(cur, st)
	}
	return st, true
}

// binding names the limit that binds and the fix. Of two limits, the one
// the fleet used the larger share of binds; the comparison holds whatever
// the estimate of the fleet's rate, since both shares scale alike.
func binding(cur ProviderBudget, st BudgetStatus) (string, string) {
	const elsewhere = "move backfill, reindex and repair to the batch lane so they stop drawing on the live budget; more replicas cannot help"
	switch {
	case cur.RequestsPerMinute > 0 && (cur.TokensPerMinute == 0 || st.RequestsUse >= st.TokensUse):
		return "requests_per_minute", fmt.Sprintf("raise the provider's requests-per-minute limit (then embedder.requests_per_minute, now %d), raise embedder.max_batch_inputs so each request carries more inputs, or %s", cur.RequestsPerMinute, elsewhere)
	case cur.TokensPerMinute > 0:
		return "tokens_per_minute", fmt.Sprintf("raise the provider's tokens-per-minute limit (then embedder.tokens_per_minute, now %d), or %s", cur.TokensPerMinute, elsewhere)
	case st.LiveThrottled > 0:
		return "provider", "the provider refuses requests (429) with no limit configured: set embedder.requests_per_minute and embedder.tokens_per_minute to the key's limits so the fleet shares them instead of storming the provider; more replicas cannot help"
	default:
		return "max_concurrency", "raise embedder.budget.max_concurrency, or " + elsewhere
	}
}

// budgetSignal is the budget-bound signal: the live lane's wait share
// against the threshold, exceeded when the fleet is budget-bound.
func budgetSignal(st BudgetStatus, threshold float64) tagged {
	return tagged{tag: TagBudget, sig: Signal{Method: "live_wait_share", Score: st.LiveWaitShare, Threshold: threshold,
		Exceeded: st.Bound, Binds: st.Binds, Fix: st.Fix,
		Details: map[string]float64{"live_throttled": float64(st.LiveThrottled), "members": float64(st.Members),
			"requests_use": st.RequestsUse, "tokens_use": st.TokensUse}}}
}

// capReplicas keeps the replica recommendation at the current count while
// the fleet is budget-bound: replicas share one provider budget, so more
// of them wait longer and drain nothing faster.
func capReplicas(ls *LagStatus, st BudgetStatus) {
	if !st.Bound || ls.Recommended <= ls.Replicas {
		return
	}
	ls.Uncapped = ls.Recommended
	ls.Recommended = ls.Replicas
	ls.CappedBy = "budget: bound by " + st.Binds + "; more replicas share the same provider budget"
}

// String is the one line the monitor command prints, e.g. "provider
// budget (shared, 4 members): live lane waited 0.52 s/s, 0 throttled;
// requests 98% of the limit, tokens 12%; BOUND by requests_per_minute:
// raise …".
func (st BudgetStatus) String() string {
	s := fmt.Sprintf("provider budget (%s, %d members): live lane waited %.2f s/s, %d throttled; requests %.0f%% of the limit, tokens %.0f%%",
		st.Mode, st.Members, st.LiveWaitShare, st.LiveThrottled, 100*st.RequestsUse, 100*st.TokensUse)
	if st.Bound {
		s += "; BOUND by " + st.Binds + ": " + st.Fix
	}
	return s
}
