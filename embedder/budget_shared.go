package embedder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisTimeout bounds every Redis call of the budget (dial, read, write):
// a Redis that does not answer within it is treated as down and the
// process falls back to its share of the limits, so a slow Redis never
// holds up the embeddings for longer.
const redisTimeout = 250 * time.Millisecond

// milli is the units a request counts for in the shared request bucket: a
// lane's share of a small burst (one request a second is a burst of one)
// is then exact instead of rounding to zero or to the whole burst.
const milli = 1000

// leaseMargin is added to the request timeout for a concurrency lease, so
// that a slot outlives its request and comes back only when the process
// that held it is gone.
const leaseMargin = 10 * time.Second

// Heartbeats: a process records itself every heartbeatEvery while it uses
// the budget, and counts as a member for memberWindow after.
const (
	heartbeatEvery = 2 * time.Second
	memberWindow   = 3 * heartbeatEvery
)

// shared is the budget held in Redis. Every decision that involves time is
// taken by a Lua script reading Redis's TIME (redis_rate's GCRA, the
// leases, the heartbeats, the pause's PTTL), so the processes' clocks never
// enter it.
type shared struct {
	rdb     *redis.Client
	limiter *redis_rate.Limiter
	// Keys, all under Prefix:Key.
	reqKey, tokKey, pauseKey, membersKey, slotsKey string
	laneSlots                                      [len(lanes)]string
	id                                             string // this process's member and lease id
}

// processID names this process among the budget's members: every client
// of the process (the primary index's, each shadow's) counts once.
var processID = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// redisClients holds one client per budget Redis URL for the process's
// lifetime: the clients of one process share its connections instead of
// each opening a pool that nothing would close.
var redisClients = struct {
	sync.Mutex
	m map[string]*redis.Client
}{m: map[string]*redis.Client{}}

func budgetRedis(url string) (*redis.Client, error) {
	redisClients.Lock()
	defer redisClients.Unlock()
	if c, ok := redisClients.m[url]; ok {
		return c, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("embedder.budget.redis_url: %w", err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = redisTimeout, redisTimeout, redisTimeout, redisTimeout
	// A failed call degrades at once; the budget retries Redis itself,
	// at most once a second.
	opts.MaxRetries = -1
	// No maintenance notifications (a cluster feature): their circuit
	// breaker starts a goroutine per failed dial that outlives the call.
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c := redis.NewClient(opts)
	redisClients.m[url] = c
	return c, nil
}

func newShared(cfg BudgetConfig) (*shared, error) {
	rdb, err := budgetRedis(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	base := cfg.Prefix + ":" + cfg.Key
	s := &shared{rdb: rdb, limiter: redis_rate.NewLimiter(rdb),
		reqKey: base + ":requests", tokKey: base + ":tokens", pauseKey: base + ":pause",
		membersKey: base + ":members", slotsKey: base + ":slots", id: processID}
	for _, l := range lanes {
		s.laneSlots[l] = base + ":slots:" + l.String()
	}
	return s, nil
}

// allow asks the GCRA bucket key (rate per minute, the lane's burst) for
// cost; it returns 0 when admitted, else how long to wait before asking
// again.
func (s *shared) allow(ctx context.Context, key string, rate, burst, cost int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	res, err := s.limiter.AllowN(ctx, key, redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Minute}, cost)
	if err != nil {
		return 0, err
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}

// pauseLeft returns how much of the fleet's pause is left (0: none).
func (s *shared) pauseLeft(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	d, err := s.rdb.PTTL(ctx, s.pauseKey).Result()
	if err != nil {
		return 0, err
	}
	return max(d, 0), nil // -2: no key, -1: no expiry (never set so)
}

// lengthen sets the pause to d unless it already lasts longer.
var lengthen = redis.NewScript(`
local left = redis.call("PTTL", KEYS[1])
local want = tonumber(ARGV[1])
if left < want then
  redis.call("SET", KEYS[1], "1", "PX", want)
  return want
end
return left
`)

func (s *shared) pause(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return lengthen.Run(ctx, s.rdb, []string{s.pauseKey}, max(d.Milliseconds(), 1)).Err()
}

// heartbeat records this process in the members ZSET (scored by Redis's
// time in milliseconds), drops those not seen for window, and returns
// how many are left.
var heartbeat = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZADD", KEYS[1], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - tonumber(ARGV[2]))
redis.call("PEXPIRE", KEYS[1], tonumber(ARGV[2]) * 10)
return redis.call("ZCARD", KEYS[1])
`)

func (s *shared) heartbeat(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	n, err := heartbeat.Run(ctx, s.rdb, []string{s.membersKey}, s.id, memberWindow.Milliseconds()).Int()
	return max(n, 1), err
}

// acquire takes a slot of the fleet's KEYS[1] (at most ARGV[2]) and of the
// lane's KEYS[2] (at most ARGV[3]) as lease ARGV[1], expiring ARGV[4] ms
// from Redis's now; expired leases (a killed process's) are dropped first.
// It returns 1 when taken, else 0.
var acquire = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[2]) or redis.call("ZCARD", KEYS[2]) >= tonumber(ARGV[3]) then
  return 0
end
local lease = tonumber(ARGV[4])
redis.call("ZADD", KEYS[1], now + lease, ARGV[1])
redis.call("ZADD", KEYS[2], now + lease, ARGV[1])
redis.call("PEXPIRE", KEYS[1], lease * 2)
redis.call("PEXPIRE", KEYS[2], lease * 2)
return 1
`)

func (s *shared) acquire(ctx context.Context, lane Lane, lease string, total, laneMax int, d time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	n, err := acquire.Run(ctx, s.rdb, []string{s.slotsKey, s.laneSlots[lane]}, lease, total, laneMax, d.Milliseconds()).Int()
	return n == 1, err
}

// refresh restarts lease ARGV[1]'s time (ARGV[2] ms from Redis's now),
// once its request has waited out the rate limits, so the lease covers the
// request itself however long the wait was.
var refresh = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZADD", KEYS[1], "XX", now + tonumber(ARGV[2]), ARGV[1])
redis.call("ZADD", KEYS[2], "XX", now + tonumber(ARGV[2]), ARGV[1])
return 1
`)

func (s *shared) refresh(ctx context.Context, lane Lane, lease string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return refresh.Run(ctx, s.rdb, []string{s.slotsKey, s.laneSlots[lane]}, lease, d.Milliseconds()).Err()
}

func (s *shared) release(ctx context.Context, lane Lane, lease string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisTimeout)
	defer cancel()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, s.slotsKey, lease)
		p.ZRem(ctx, s.laneSlots[lane], lease)
		return nil
	})
	return err
}

// ping checks that Redis answers again (while degraded).
func (s *shared) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}
