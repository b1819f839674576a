package fallback

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ragsync/ragsync/internal/redact"
)

// Config configures a FrontDoor. The yaml tags are the names under
// `frontdoor:` in ragsync.yaml; Validate reports problems as
// "frontdoor.<name>: …".
type Config struct {
	// RedisURL is where the streams, cache and Bloom bitmaps live; the caller
	// opens the client (see OpenRedis). Defaults to redis://127.0.0.1:6379/0.
	RedisURL string `yaml:"redis_url"`
	// Prefix starts every Redis key the front door uses. Defaults to "ragsync".
	Prefix string `yaml:"prefix"`
	// Index is the ragsync index queried; it is part of every cache key so
	// several indexes can share one Redis. Defaults to "default".
	Index string `yaml:"index"`
	// Workers is the number of request readers in this process. Each reads
	// a batch of requests, answers all its cache hits in one Redis round
	// trip that also reads the next batch, and reads on while the batch's
	// misses are searched. One keeps up with far more hits than a process's
	// misses can be searched; more readers split the requests into smaller
	// batches, and each batch costs Redis a round trip. Defaults to 1.
	Workers int `yaml:"workers"`
	// Group is the consumer group shared by every front door process.
	// Defaults to "frontdoor".
	Group string `yaml:"group"`
	// Consumer names this process inside the group; worker i uses
	// Consumer-i. Defaults to hostname-pid-random.
	Consumer string `yaml:"consumer"`
	// BatchSize is how many requests one XREADGROUP (or XAUTOCLAIM) takes.
	// Defaults to 16.
	BatchSize int `yaml:"batch_size"`
	// MaxInFlight is how many requests this process may have in flight past
	// the cache (Bloom check, embed, search, reply); at that bound the
	// workers stop reading until one finishes, and the requests wait in the
	// stream for other processes. Defaults to 64.
	MaxInFlight int `yaml:"max_in_flight"`
	// BlockTimeout bounds one blocking XREADGROUP, and so how long Run takes
	// to notice cancellation. Defaults to 500ms.
	BlockTimeout time.Duration `yaml:"block_timeout"`
	// MaxDeliveries is how many times a request is tried before it is
	// dead-lettered. Defaults to 3.
	MaxDeliveries int `yaml:"max_deliveries"`
	// MinIdle is how long a delivered, unacknowledged request waits before
	// another worker reclaims it with XAUTOCLAIM. Defaults to 5s.
	MinIdle time.Duration `yaml:"min_idle"`
	// ReclaimInterval is how often pending requests are reclaimed, streams
	// trimmed and gauges refreshed. Defaults to MinIdle/2.
	ReclaimInterval time.Duration `yaml:"reclaim_interval"`
	// SearchTimeout bounds one embed + vector search. Defaults to 2s.
	SearchTimeout time.Duration `yaml:"search_timeout"`
	// CacheTTL is how long a non-empty result stays fresh; each entry gets up
	// to CacheJitter×CacheTTL more so entries written together do not expire
	// together. Defaults to 5m.
	CacheTTL time.Duration `yaml:"cache_ttl"`
	// CacheJitter is the fraction of CacheTTL (and NegativeTTL) added at
	// random. Defaults to 0.1.
	CacheJitter float64 `yaml:"cache_jitter"`
	// NegativeTTL is how long an empty result is cached. Defaults to 30s.
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// StaleTTL is how long the last good answer is kept for degraded
	// replies; it must exceed CacheTTL. Defaults to 24h.
	StaleTTL time.Duration `yaml:"stale_ttl"`
	// EmbeddingTTL is how long a query embedding is cached by text hash.
	// Defaults to 24h.
	EmbeddingTTL time.Duration `yaml:"embedding_ttl"`
	// LockTTL is the PX of the cross-worker miss lock; it should exceed
	// SearchTimeout so a slow search is not duplicated. Defaults to
	// SearchTimeout + 1s.
	LockTTL time.Duration `yaml:"lock_ttl"`
	// LockWait is how long a worker waits for another worker's result before
	// giving up and retrying the request. Defaults to LockTTL + 1s.
	LockWait time.Duration `yaml:"lock_wait"`
	// MaxK is the largest k a request may ask for. Defaults to 50.
	MaxK int `yaml:"max_k"`
	// MaxQueryBytes is the largest query text accepted, in bytes. Defaults
	// to 4096.
	MaxQueryBytes int `yaml:"max_query_bytes"`
	// AllowedFilters lists the filter keys a request may use. "doc_id" and
	// "table" are handled by the front door (Bloom check, table match); any
	// other key is matched against document metadata. Defaults to
	// [doc_id, table].
	AllowedFilters []string `yaml:"allowed_filters"`
	// ReplyPrefix is the namespace of reply streams: a request's reply_to
	// must start with it, or it is refused (counted invalid) without a
	// reply. Without it, reply_to could name the request stream, the cache
	// generation or any other key, and the reply's XADD, PEXPIRE and
	// MAXLEN would damage it. It must not overlap the front
	// door's own keys. Defaults to "<prefix>:reply:".
	ReplyPrefix string `yaml:"reply_prefix"`
	// MaxFilterBytes is the largest filter field accepted, in bytes,
	// checked before the JSON is parsed. Defaults to 4096.
	MaxFilterBytes int `yaml:"max_filter_bytes"`
	// MaxRequestBytes bounds a whole request entry (field names and values
	// together), checked before anything is parsed, so a huge entry costs
	// one read, not a parse. Defaults to 16384.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// ReplyTTL is set on reply streams so abandoned ones disappear.
	// Defaults to 5m.
	ReplyTTL time.Duration `yaml:"reply_ttl"`
	// ReplyMaxLen caps a reply stream (MAXLEN ~). Defaults to 1000.
	ReplyMaxLen int64 `yaml:"reply_max_len"`
	// IdempotencyTTL is how long a request id is remembered as answered, so
	// a redelivered or duplicated request is never answered twice. Every
	// request leaves one marker key for this long, so Redis holds about
	// rate × TTL of them (~150 bytes each: 5,000 req/s × 10m is 3M keys,
	// ~450 MB; the 24h this once defaulted to would be ~65 GB). It must
	// cover the redelivery window, max_deliveries × (min_idle +
	// search_timeout), and the time within which clients resend an id.
	// Defaults to 10m.
	IdempotencyTTL time.Duration `yaml:"idempotency_ttl"`
	// DLQMaxLen caps the dead-letter stream (MAXLEN ~). Defaults to 10000.
	DLQMaxLen int64 `yaml:"dlq_max_len"`
	// BreakerFailures is how many consecutive search failures open the
	// circuit breaker. Defaults to 5.
	BreakerFailures int `yaml:"breaker_failures"`
	// BreakerCooldown is how long the breaker stays open before one probe
	// request may try the real search again. Defaults to 10s.
	BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	// MaxAfterWait caps how long a request with after waits for the
	// index's watermark (its after_timeout_ms, DefaultAfterWait without
	// one); past it the reply is not_yet. Defaults to 30s.
	MaxAfterWait time.Duration `yaml:"max_after_wait"`
	// MaxAfterWaiters bounds the requests of this process waiting for the
	// watermark; one more is answered not_yet at once. A waiter holds no
	// connection and no in-flight slot, only a goroutine: every one is
	// woken by the process's single LISTEN on the watermark. Defaults to
	// 1024.
	MaxAfterWaiters int `yaml:"max_after_waiters"`
	// Bloom sizes the Bloom filters of known tenants and document ids.
	Bloom BloomConfig `yaml:"bloom"`
	// Redact masks secrets in every text the front door writes to Redis
	// (a reply's reason, a dead letter's reason, the failure remembered
	// between deliveries): an embedder's error may quote the API key, a
	// driver's a connection string, and clients read both. serve sets it
	// to the process's redactor. Defaults to the password patterns of
	// redact.String.
	Redact func(string) string `yaml:"-"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Redact == nil {
		c.Redact = redact.String
	}
	if c.RedisURL == "" {
		c.RedisURL = "redis://127.0.0.1:6379/0"
	}
	if c.Prefix == "" {
		c.Prefix = "ragsync"
	}
	if c.Index == "" {
		c.Index = "default"
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.Group == "" {
		c.Group = "frontdoor"
	}
	if c.Consumer == "" {
		c.Consumer = defaultConsumer()
	}
	if c.BatchSize == 0 {
		c.BatchSize = 16
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 64
	}
	if c.BlockTimeout == 0 {
		c.BlockTimeout = 500 * time.Millisecond
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = 3
	}
	if c.MinIdle == 0 {
		c.MinIdle = 5 * time.Second
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = c.MinIdle / 2
	}
	if c.SearchTimeout == 0 {
		c.SearchTimeout = 2 * time.Second
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = 5 * time.Minute
	}
	if c.CacheJitter == 0 {
		c.CacheJitter = 0.1
	}
	if c.NegativeTTL == 0 {
		c.NegativeTTL = 30 * time.Second
	}
	if c.StaleTTL == 0 {
		c.StaleTTL = 24 * time.Hour
	}
	if c.EmbeddingTTL == 0 {
		c.EmbeddingTTL = 24 * time.Hour
	}
	if c.LockTTL == 0 {
		c.LockTTL = c.SearchTimeout + time.Second
	}
	if c.LockWait == 0 {
		c.LockWait = c.LockTTL + time.Second
	}
	if c.MaxK == 0 {
		c.MaxK = 50
	}
	if c.MaxQueryBytes == 0 {
		c.MaxQueryBytes = 4096
	}
	if c.AllowedFilters == nil {
		c.AllowedFilters = []string{FilterDocID, FilterTable}
	}
	if c.ReplyPrefix == "" {
		c.ReplyPrefix = c.Prefix + ":reply:"
	}
	if c.MaxFilterBytes == 0 {
		c.MaxFilterBytes = 4096
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 16384
	}
	if c.ReplyTTL == 0 {
		c.ReplyTTL = 5 * time.Minute
	}
	if c.ReplyMaxLen == 0 {
		c.ReplyMaxLen = 1000
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = 10 * time.Minute
	}
	if c.DLQMaxLen == 0 {
		c.DLQMaxLen = 10000
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = 5
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = 10 * time.Second
	}
	if c.MaxAfterWait == 0 {
		c.MaxAfterWait = 30 * time.Second
	}
	if c.MaxAfterWaiters == 0 {
		c.MaxAfterWaiters = 1024
	}
	c.Bloom = c.Bloom.WithDefaults()
	return c
}

var filterKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// Validate reports every problem at once, each naming its yaml path and the
// fix. Call it on the result of WithDefaults.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("frontdoor.%s: "+format, append([]any{field}, args...)...))
	}
	if c.Prefix == "" {
		add("prefix", "must not be empty, e.g. ragsync")
	}
	if c.Index == "" {
		add("index", "must not be empty; set it to the ragsync index name")
	}
	if c.Group == "" {
		add("group", "must not be empty, e.g. frontdoor")
	}
	positive := []struct {
		name string
		v    int64
	}{
		{"workers", int64(c.Workers)}, {"batch_size", int64(c.BatchSize)}, {"max_in_flight", int64(c.MaxInFlight)},
		{"max_deliveries", int64(c.MaxDeliveries)}, {"max_k", int64(c.MaxK)},
		{"max_query_bytes", int64(c.MaxQueryBytes)}, {"reply_max_len", c.ReplyMaxLen},
		{"max_filter_bytes", int64(c.MaxFilterBytes)}, {"max_request_bytes", int64(c.MaxRequestBytes)},
		{"dlq_max_len", c.DLQMaxLen}, {"breaker_failures", int64(c.BreakerFailures)},
		{"max_after_waiters", int64(c.MaxAfterWaiters)},
	}
	for _, p := range positive {
		if p.v <= 0 {
			add(p.name, "must be > 0, got %d", p.v)
		}
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"block_timeout", c.BlockTimeout}, {"min_idle", c.MinIdle}, {"reclaim_interval", c.ReclaimInterval},
		{"search_timeout", c.SearchTimeout}, {"cache_ttl", c.CacheTTL}, {"negative_ttl", c.NegativeTTL},
		{"stale_ttl", c.StaleTTL}, {"embedding_ttl", c.EmbeddingTTL}, {"lock_ttl", c.LockTTL},
		{"lock_wait", c.LockWait}, {"reply_ttl", c.ReplyTTL}, {"idempotency_ttl", c.IdempotencyTTL},
		{"breaker_cooldown", c.BreakerCooldown}, {"max_after_wait", c.MaxAfterWait},
	}
	for _, d := range durations {
		if d.v <= 0 {
			add(d.name, "must be a positive duration such as 5s, got %s", d.v)
		}
	}
	if c.BlockTimeout > 0 && c.BlockTimeout < time.Millisecond {
		add("block_timeout", "must be at least 1ms (0 would block forever), got %s", c.BlockTimeout)
	}
	if c.CacheJitter < 0 || c.CacheJitter > 1 {
		add("cache_jitter", "must be between 0 and 1, got %g", c.CacheJitter)
	}
	if c.StaleTTL > 0 && c.StaleTTL < c.CacheTTL {
		add("stale_ttl", "must be >= cache_ttl (%s) so a stale answer outlives the fresh one, got %s", c.CacheTTL, c.StaleTTL)
	}
	if c.LockTTL > 0 && c.SearchTimeout > 0 && c.LockTTL < c.SearchTimeout {
		add("lock_ttl", "must be >= search_timeout (%s) or slow searches are duplicated, got %s", c.SearchTimeout, c.LockTTL)
	}
	if window := time.Duration(c.MaxDeliveries) * (c.MinIdle + c.SearchTimeout); c.IdempotencyTTL > 0 && c.IdempotencyTTL < window {
		add("idempotency_ttl", "must cover the redelivery window max_deliveries × (min_idle + search_timeout) = %s, or a slow first delivery can be answered twice; got %s", window, c.IdempotencyTTL)
	}
	if c.MaxRequestBytes > 0 && c.MaxRequestBytes < c.MaxQueryBytes+c.MaxFilterBytes {
		add("max_request_bytes", "must be >= max_query_bytes + max_filter_bytes (%d), or valid requests are refused; got %d", c.MaxQueryBytes+c.MaxFilterBytes, c.MaxRequestBytes)
	}
	if err := c.validateReplyPrefix(); err != nil {
		errs = append(errs, err)
	}
	for i, f := range c.AllowedFilters {
		if !filterKeyRE.MatchString(f) {
			add(fmt.Sprintf("allowed_filters[%d]", i), "%q is not a valid filter key (letters, digits, _ . -)", f)
		}
	}
	if err := c.Bloom.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateReplyPrefix refuses a reply namespace that holds, or is held by,
// a key family of the front door: replies would then write to it.
func (c Config) validateReplyPrefix() error {
	if c.ReplyPrefix == "" || c.Prefix == "" {
		return nil // reported as prefix, or filled in by WithDefaults
	}
	for _, own := range (keys{prefix: c.Prefix, index: c.Index}).families() {
		if strings.HasPrefix(own, c.ReplyPrefix) || strings.HasPrefix(c.ReplyPrefix, own) {
			return fmt.Errorf("frontdoor.reply_prefix: %q overlaps the front door's own keys %q*; use a namespace of its own such as %q", c.ReplyPrefix, own, c.Prefix+":reply:")
		}
	}
	return nil
}
