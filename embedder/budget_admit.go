package embedder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragsync/ragsync/internal/redact"
)

// budget admits every attempt of an OpenAI client: the fleet's pause after
// a provider's 429, the key's bound on requests in flight, and its
// requests and tokens per minute, each in the attempt's lane. With Redis
// (shared) those are the fleet's; without, or while Redis is unreachable
// (degraded: this process's share of them), the process's own.
type budget struct {
	rpm, tpm, maxConc int
	shares            LaneShares
	lease             time.Duration
	// local is the per-process limits without Redis (today's buckets).
	local limits
	// localSlots bounds the requests in flight without Redis.
	localSlots chan struct{}
	sh         *shared // nil without Redis
	redisURL   string  // redacted, for logs
	log        *slog.Logger
	// now is the process's clock: only local deadlines (the process-local
	// pause, heartbeat and retry spacing) read it; tests offset it.
	now func() time.Time

	// gates lets one caller per lane at a time ask the budget, so a
	// process's requests queue in order instead of all polling Redis.
	gates [len(lanes)]chan struct{}

	pauseUntil atomic.Int64 // process-local pause, UnixNano on now's clock
	members    atomic.Int64 // processes last seen sharing the key
	nextBeat   atomic.Int64 // UnixNano of the next heartbeat due

	mu       sync.Mutex
	degraded bool
	lastTry  time.Time      // last attempt to reach Redis while degraded
	fallback degradedLimits // this process's share while degraded

	counters [len(lanes)]laneCounters
}

type laneCounters struct {
	requests, tokens, wait, throttled atomic.Int64
}

// degradedLimits are a process's share of the key's limits while Redis is
// unreachable: the limits ÷ the members last seen.
type degradedLimits struct {
	limits
	slots chan struct{} // nil: no bound on requests in flight
	share int           // the members the limits were divided by
}

func newBudget(cfg Config, log *slog.Logger) (*budget, error) {
	bc := cfg.BudgetConfig()
	b := &budget{rpm: cfg.RequestsPerMinute, tpm: cfg.TokensPerMinute, maxConc: bc.MaxConcurrency, shares: bc.Shares,
		lease: cfg.Timeout + leaseMargin, local: newLimits(cfg.RequestsPerMinute, cfg.TokensPerMinute),
		redisURL: redact.String(bc.RedisURL), log: log, now: time.Now}
	for i := range b.gates {
		b.gates[i] = make(chan struct{}, 1)
	}
	b.members.Store(1)
	if bc.RedisURL == "" {
		if b.maxConc > 0 {
			b.localSlots = make(chan struct{}, b.maxConc)
		}
		return b, nil
	}
	sh, err := newShared(bc)
	if err != nil {
		return nil, err
	}
	b.sh = sh
	return b, nil
}

// limited reports whether any limit is configured.
func (b *budget) limited() bool { return b.rpm > 0 || b.tpm > 0 || b.maxConc > 0 }

// mode returns BudgetStatus.Mode.
func (b *budget) mode() string {
	switch {
	case !b.limited():
		return BudgetNone
	case b.sh == nil:
		return BudgetLocal
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.degraded {
		return BudgetDegraded
	}
	return BudgetShared
}

// admit waits until an attempt of tokens tokens may go in lane, and
// returns the function that gives its concurrency slot back once it is
// answered. Only ctx's end makes it fail: a Redis failure degrades to the
// process's share instead. A retry that has just waited out the pause its
// own 429 set (waited) does not wait for the pause again.
func (b *budget) admit(ctx context.Context, lane Lane, tokens int, waited bool) (func(), time.Duration, error) {
	c := &b.counters[lane]
	if !b.limited() && b.sh == nil && (waited || b.localPause() <= 0) {
		// Nothing to wait for (no limits, no Redis, no pause).
		c.requests.Add(1)
		c.tokens.Add(int64(tokens))
		return func() {}, 0, nil
	}
	start := time.Now()
	release, err := b.admitGated(ctx, lane, tokens, waited)
	wait := time.Since(start)
	c.wait.Add(int64(wait))
	if err != nil {
		return nil, wait, err
	}
	c.requests.Add(1)
	c.tokens.Add(int64(tokens))
	return release, wait, nil
}

func (b *budget) admitGated(ctx context.Context, lane Lane, tokens int, waited bool) (func(), error) {
	select {
	case b.gates[lane] <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-b.gates[lane] }()
	for {
		if !b.useShared(ctx) {
			return b.admitLocal(ctx, lane, tokens, waited)
		}
		release, err := b.admitShared(ctx, lane, tokens, waited)
		if err == nil || ctx.Err() != nil {
			return release, err
		}
		b.degrade(err)
	}
}

// useShared reports whether to ask Redis: configured, and not degraded or
// due for another try (at most once a second), which brings the shared
// budget back when it answers.
func (b *budget) useShared(ctx context.Context) bool {
	if b.sh == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.degraded {
		return true
	}
	if b.now().Sub(b.lastTry) < time.Second {
		return false
	}
	b.lastTry = b.now()
	if err := b.sh.ping(ctx); err != nil {
		return false
	}
	b.degraded = false
	b.log.InfoContext(ctx, "embedding budget: Redis answers again, the provider key's limits are shared by the fleet again",
		"redis_url", b.redisURL)
	return true
}

// degrade switches to the process's share of the limits after a Redis
// failure, logging once.
func (b *budget) degrade(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.degraded {
		return
	}
	b.degraded = true
	b.lastTry = b.now()
	n := int(max(b.members.Load(), 1))
	b.fallback = newDegraded(b.rpm, b.tpm, b.maxConc, n)
	b.log.Warn("embedding budget: Redis is unreachable; this process keeps to its share of the provider key's limits until it answers again (retried every second)",
		"redis_url", b.redisURL, "members", n, "share", fmt.Sprintf("1/%d", n),
		"requests_per_minute", b.rpm/n, "tokens_per_minute", b.tpm/n, "max_concurrency", max(b.maxConc/n, 1),
		"error", redact.String(err.Error()))
}

// newDegraded divides the key's limits by the members last seen (>= 1).
func newDegraded(rpm, tpm, maxConc, members int) degradedLimits {
	members = max(members, 1)
	d := degradedLimits{share: members}
	if rpm > 0 {
		d.limits.requests = newLimits(max(rpm/members, 1), 0).requests
	}
	if tpm > 0 {
		d.limits.tokens = newLimits(0, max(tpm/members, 1)).tokens
	}
	if maxConc > 0 {
		d.slots = make(chan struct{}, max(maxConc/members, 1))
	}
	return d
}

// admitShared is admission in Redis: the fleet's pause, a concurrency
// slot, then the request and token buckets in the lane's depth.
func (b *budget) admitShared(ctx context.Context, lane Lane, tokens int, waited bool) (func(), error) {
	if err := b.beat(ctx); err != nil {
		return nil, err
	}
	release := func() {}
	refreshLease := func() error { return nil }
	for !waited {
		left, err := b.sh.pauseLeft(ctx)
		if err != nil {
			return nil, err
		}
		left = max(left, b.localPause())
		if left <= 0 {
			break
		}
		if err := sleepCtx(ctx, jitter(left)); err != nil {
			return nil, err
		}
	}
	if b.maxConc > 0 {
		lease := fmt.Sprintf("%s:%d", b.sh.id, rand.Uint64())
		laneMax := max(int(b.shares.Of(lane)*float64(b.maxConc)), 1)
		for {
			ok, err := b.sh.acquire(ctx, lane, lease, b.maxConc, laneMax, b.lease)
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			// Slots come back when an answer arrives; ask again soon.
			if err := sleepCtx(ctx, 5*time.Millisecond+rand.N(20*time.Millisecond)); err != nil {
				return nil, err
			}
		}
		release = func() { _ = b.sh.release(ctx, lane, lease) }
		refreshLease = func() error { return b.sh.refresh(ctx, lane, lease, b.lease) }
	}
	fail := func(err error) (func(), error) {
		release()
		return nil, err
	}
	if b.rpm > 0 {
		burst := max(int(float64(RequestBurst(b.rpm)*milli)*b.shares.Of(lane)), 1)
		if err := b.take(ctx, b.sh.reqKey, b.rpm*milli, burst, milli); err != nil {
			return fail(err)
		}
	}
	if b.tpm > 0 {
		burst := max(int(float64(TokenBurst(b.tpm))*b.shares.Of(lane)), 1)
		if err := b.take(ctx, b.sh.tokKey, b.tpm, burst, max(tokens, 1)); err != nil {
			return fail(err)
		}
	}
	if err := refreshLease(); err != nil {
		return fail(err)
	}
	return release, nil
}

// take reserves cost in the GCRA bucket key, in installments no larger
// than burst (the lane's depth), so that a request larger than its lane
// may draw at once waits for its whole cost instead of being refused for
// ever or counted short.
func (b *budget) take(ctx context.Context, key string, rate, burst, cost int) error {
	for cost > 0 {
		piece := min(cost, burst)
		wait, err := b.sh.allow(ctx, key, rate, burst, piece)
		if err != nil {
			return err
		}
		if wait == 0 {
			cost -= piece
			continue
		}
		if err := sleepCtx(ctx, jitter(wait)); err != nil {
			return err
		}
	}
	return nil
}

// beat records the process as a member every heartbeatEvery while it uses
// the budget.
func (b *budget) beat(ctx context.Context) error {
	now := b.now().UnixNano()
	if next := b.nextBeat.Load(); now < next {
		return nil
	}
	n, err := b.sh.heartbeat(ctx)
	if err != nil {
		return err
	}
	b.members.Store(int64(n))
	b.nextBeat.Store(now + int64(heartbeatEvery))
	return nil
}

// admitLocal is admission in the process alone: its pause, then its own
// limits (no Redis) or its share of the key's (degraded).
func (b *budget) admitLocal(ctx context.Context, lane Lane, tokens int, waited bool) (func(), error) {
	for left := b.localPause(); !waited && left > 0; left = b.localPause() {
		if err := sleepCtx(ctx, left); err != nil {
			return nil, err
		}
	}
	slots, lim := b.localSlots, b.local
	if b.sh != nil {
		b.mu.Lock()
		slots, lim = b.fallback.slots, b.fallback.limits
		b.mu.Unlock()
	}
	release := func() {}
	if slots != nil {
		select {
		case slots <- struct{}{}:
			release = func() { <-slots }
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var err error
	if b.sh == nil {
		_, err = lim.wait(ctx, tokens)
	} else {
		err = lim.waitAll(ctx, tokens)
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// localPause is what is left of this process's pause.
func (b *budget) localPause() time.Duration {
	return time.Duration(b.pauseUntil.Load() - b.now().UnixNano())
}

// pause holds back the fleet (or, without Redis, this process) for d: the
// provider answered 429 or said a limit is spent.
func (b *budget) pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	until := b.now().Add(d).UnixNano()
	for {
		cur := b.pauseUntil.Load()
		if cur >= until || b.pauseUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	if b.useSharedNoProbe() {
		if err := b.sh.pause(ctx, d); err != nil && !errors.Is(err, context.Canceled) {
			b.degrade(err)
		}
	}
}

func (b *budget) useSharedNoProbe() bool {
	if b.sh == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.degraded
}

// status is a snapshot of the budget. Reading it (the monitor does every
// few seconds in serve) also keeps an idle process among the members.
func (b *budget) status() BudgetStatus {
	if b.useSharedNoProbe() {
		ctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
		_ = b.beat(ctx) // a failure shows at the next admission, which degrades
		cancel()
	}
	st := BudgetStatus{Mode: b.mode(), Members: int(max(b.members.Load(), 1)), Lanes: make(map[Lane]LaneStats, len(lanes))}
	for _, l := range lanes {
		c := &b.counters[l]
		st.Lanes[l] = LaneStats{Requests: c.requests.Load(), Tokens: c.tokens.Load(),
			Wait: time.Duration(c.wait.Load()), Throttled: c.throttled.Load()}
	}
	return st
}

// jitter adds up to a tenth (at least a millisecond's range) to d, so the
// processes that were told the same wait do not ask again together.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/10+time.Millisecond)
}

// providerSignals turns the provider's word on its limits into the fleet's
// pause: a 429 for its Retry-After (or backoff's first step when it gives
// none), and any reply that says a limit is spent until the next request's
// worth has refilled (spentWait).
func (o *OpenAI) providerSignals(ctx context.Context, lane Lane, tokens int, hdr http.Header, err error) {
	var api *APIError
	if errors.As(err, &api) && api.StatusCode == http.StatusTooManyRequests {
		o.budget.counters[lane].throttled.Add(1)
		if wait, ok := serverWait(hdr, replyTime(hdr)); ok {
			o.budget.pause(ctx, wait)
		}
		return
	}
	if wait, ok := spentWait(hdr, tokens); ok {
		o.budget.pause(ctx, wait)
	}
}
