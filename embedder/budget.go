package embedder

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/internal/redact"
)

// BudgetConfig is embedder.budget: the provider key's limits
// (Config.RequestsPerMinute, TokensPerMinute) shared by every process that
// uses the key, held in Redis.
type BudgetConfig struct {
	// RedisURL holds the budget every process using the key shares, e.g.
	// redis://127.0.0.1:6379/0. Empty: per-process limits only (the
	// configuration defaults it to frontdoor.redis_url when that is set).
	// Defaults to "".
	RedisURL string `yaml:"redis_url"`
	// Key names the provider key's budget in Redis. Processes with the
	// same Key share one budget. Defaults to a hash of base_url and
	// api_key (never the key itself), so processes with the same key share
	// it.
	Key string `yaml:"key"`
	// Prefix is the start of every Redis key of the budget (the request
	// and token buckets get redis_rate's own "rate:" in front of it).
	// Defaults to "ragsync:budget".
	Prefix string `yaml:"prefix"`
	// MaxConcurrency bounds the fleet's requests in flight on the key.
	// Defaults to 0: no fleet bound.
	MaxConcurrency int `yaml:"max_concurrency"`
	// Shares says how deep each lane may draw the shared buckets, as a
	// fraction of the burst (and of MaxConcurrency): a lower lane is
	// admitted only while the rest is left for the higher ones. Defaults
	// to live 1.0, debt 0.5, backfill 0.25.
	Shares LaneShares `yaml:"shares"`
}

// LaneShares are the fractions of the budget's bursts each lane may draw,
// each in (0, 1].
type LaneShares struct {
	// Live is serve's own changes' share. Defaults to 1.0.
	Live float64 `yaml:"live"`
	// Debt is the repayment of reuse debt's share. Defaults to 0.5.
	Debt float64 `yaml:"debt"`
	// Backfill is backfill, reindex and repair's share. Defaults to 0.25.
	Backfill float64 `yaml:"backfill"`
}

// Of returns lane l's share.
func (s LaneShares) Of(l Lane) float64 {
	switch l {
	case LaneLive:
		return s.Live
	case LaneDebt:
		return s.Debt
	}
	return s.Backfill
}

// Default prefix and shares of BudgetConfig.
const (
	DefaultBudgetPrefix = "ragsync:budget"
	defaultShareLive    = 1.0
	defaultShareDebt    = 0.5
	defaultShareBack    = 0.25
)

// withDefaults fills the zero fields of b; baseURL and apiKey name the
// provider key for the default Key.
func (b BudgetConfig) withDefaults(baseURL, apiKey string) BudgetConfig {
	if b.Key == "" {
		h := sha256.Sum256([]byte(baseURL + "\x00" + apiKey))
		b.Key = hex.EncodeToString(h[:8])
	}
	if b.Prefix == "" {
		b.Prefix = DefaultBudgetPrefix
	}
	if b.Shares.Live == 0 {
		b.Shares.Live = defaultShareLive
	}
	if b.Shares.Debt == 0 {
		b.Shares.Debt = defaultShareDebt
	}
	if b.Shares.Backfill == 0 {
		b.Shares.Backfill = defaultShareBack
	}
	return b
}

// Budget modes (BudgetStatus.Mode).
const (
	BudgetNone     = "none"     // no limits configured
	BudgetLocal    = "local"    // per-process limits: no Redis configured
	BudgetShared   = "shared"   // the fleet's budget in Redis
	BudgetDegraded = "degraded" // Redis configured but unreachable: this process's share
)

// BudgetStatus is a snapshot of a client's provider budget.
type BudgetStatus struct {
	// Mode is "none" (no limits), "local" (per process: no Redis
	// configured), "shared" (Redis) or "degraded" (Redis configured but
	// unreachable: this process's share of the limits).
	Mode string
	// Members is how many processes were last seen sharing the key (>= 1).
	Members int
	// Lanes holds each lane's counters.
	Lanes map[Lane]LaneStats
}

// LaneStats are the cumulative counters of one lane.
type LaneStats struct {
	Requests  int64         // requests admitted by the budget, retries included
	Tokens    int64         // tokens admitted by the budget
	Wait      time.Duration // total time waited for the budget (limits, fleet pause, concurrency)
	Throttled int64         // 429s received in this lane
}

// validate reports every problem of b (after withDefaults), each naming
// its yaml path and the fix.
func (b BudgetConfig) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.RedisURL != "" {
		if _, err := redis.ParseURL(b.RedisURL); err != nil {
			add("embedder.budget.redis_url: %q is not a Redis URL (%v); write e.g. redis://127.0.0.1:6379/0, or leave it empty for per-process limits",
				redact.String(b.RedisURL), redact.String(err.Error()))
		}
	}
	if b.MaxConcurrency < 0 {
		add("embedder.budget.max_concurrency: must be >= 0 (0: no fleet bound on requests in flight), got %d", b.MaxConcurrency)
	}
	if strings.TrimSpace(b.Prefix) == "" || strings.ContainsAny(b.Prefix, " \t\r\n{}") {
		add("embedder.budget.prefix: %q must be a non-empty Redis key prefix without spaces or braces, e.g. %q", b.Prefix, DefaultBudgetPrefix)
	}
	if strings.ContainsAny(b.Key, " \t\r\n{}") {
		add("embedder.budget.key: %q must not hold spaces or braces; leave it empty to share the budget of every process with the same base_url and api_key", b.Key)
	}
	for _, l := range lanes {
		if s := b.Shares.Of(l); !(s > 0 && s <= 1) {
			add("embedder.budget.shares.%s: must be in (0, 1] (the fraction of the shared bursts the lane may draw), got %g", l, s)
		}
	}
	if b.Shares.Debt > b.Shares.Live || b.Shares.Backfill > b.Shares.Debt {
		add("embedder.budget.shares: live %g, debt %g, backfill %g must not increase from live to backfill (a lower lane would draw deeper than a higher one); e.g. live 1, debt 0.5, backfill 0.25",
			b.Shares.Live, b.Shares.Debt, b.Shares.Backfill)
	}
	return errs
}

// Budget returns a snapshot of the client's provider budget: its mode,
// the processes sharing it and each lane's counters.
func (o *OpenAI) Budget() BudgetStatus { return o.budget.status() }
