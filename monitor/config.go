package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCosineBound is Config.CosineBound's default: the fidelity bound
// the monitor alarms on and near-duplicate reuse keeps its vectors within
// (pipeline.ReuseConfig.Bound is handed this setting, never a copy).
const DefaultCosineBound = 0.05

// Config is the monitor: section of ragsync.yaml.
type Config struct {
	// Enabled runs the monitor inside serve. Defaults to true (set
	// enabled: false to turn it off).
	Enabled *bool `yaml:"enabled"`
	// Interval between checks; every check publishes its events. Defaults
	// to 5m.
	Interval time.Duration `yaml:"interval"`
	// Canaries replaces the shipped probe texts with the user's own. Empty
	// means the ~32 shipped probes.
	Canaries []string `yaml:"canaries"`
	// SampleSize is how many stored chunks each check re-embeds. Defaults
	// to 64; 0 keeps the default, a negative value turns sampling off.
	SampleSize int `yaml:"sample_size"`
	// UniformShare is the share of the sample drawn uniformly from all
	// chunks; the rest is split between reused vectors and the oldest cache
	// entries. Defaults to 0.25.
	UniformShare float64 `yaml:"uniform_share"`
	// CosineBound is the cosine distance past which a stored vector no
	// longer matches a fresh embedding of its text (canaries, samples,
	// repair), and the distance near-duplicate reuse may predict for a
	// vector it reuses (reuse reads this setting). Defaults to 0.05 (see
	// docs/monitor.md, "Why cosine and not the normalised L2", for the
	// measurements behind it).
	CosineBound float64 `yaml:"cosine_bound"`
	// L2Threshold is the design notes' normalised L2 rule, ‖prev − curr‖₂ >
	// threshold × dimensions, reported beside the cosine bound for
	// comparison; it never alarms. Defaults to 0.008.
	L2Threshold float64 `yaml:"l2_threshold"`
	// MaxShareOverBound is the share of sampled stored vectors past the
	// bound that raises the reuse-debt alarm. Defaults to 0.1.
	MaxShareOverBound float64 `yaml:"max_share_over_bound"`
	// MaxTokensPerHour caps what canaries and the sampler send to the
	// embedding API. Defaults to 100000; the canaries alone cost about 600
	// tokens a check.
	MaxTokensPerHour int `yaml:"max_tokens_per_hour"`
	// ReferenceSize is the number of vectors in the drift reference
	// window. Defaults to 2000: with WindowSize 2000 the smallest size
	// measured to keep the sampling distortion ε ≤ 0.02 (docs/monitor.md).
	ReferenceSize int `yaml:"reference_size"`
	// WindowSize is the number of vectors in the current sliding window,
	// and of front-door queries in the query window. Defaults to 2000.
	WindowSize int `yaml:"window_size"`
	// QueryReferenceSize is the number of front-door query vectors in the
	// query reference (the first ones after creation, or the recent ones
	// pinned with `ragsync monitor reference --reset --queries`) and in the
	// sliding window of recent queries compared with it. Queries are short
	// and by nature unlike chunks, so query drift compares queries
	// with queries; their distance to the corpus is reported beside it.
	// Defaults to 1000.
	QueryReferenceSize int `yaml:"query_reference_size"`
	// Components is the number of principal directions of the reference
	// that drift is measured on, besides the cosine to its centroid.
	// Defaults to 3.
	Components int `yaml:"components"`
	// Topic is the Kafka topic events go to when brokers are known.
	// Defaults to ragsync.monitor.
	Topic string `yaml:"topic"`
	// Brokers overrides source.kafka.brokers for events; with neither, no
	// Kafka events.
	Brokers []string `yaml:"brokers"`
	// StreamMaxLen trims the Redis Stream <prefix>:monitor (approximately)
	// to this many events. Defaults to 10000.
	StreamMaxLen int `yaml:"stream_max_len"`
	// MaxReplicas bounds the recommended replica count besides the
	// partition count. Defaults to 0: the partition count only.
	MaxReplicas int `yaml:"max_replicas"`
	// DrainTarget is how fast the recommended replicas should drain the
	// predicted backlog. Defaults to 5m.
	DrainTarget time.Duration `yaml:"drain_target"`
	// BudgetBoundShare is when the fleet counts as budget-bound rather
	// than CPU- or Postgres-bound: the live lane's requests waited for the
	// provider budget, together, at least this many seconds per second of
	// a check's window (or the provider throttled them). Then the budget
	// event is exceeded and the recommended replicas are held at the
	// current count, since replicas share the budget. Defaults to 0.25.
	BudgetBoundShare float64 `yaml:"budget_bound_share"`

	// Logger receives the monitor's log and its events. Nil discards.
	Logger *slog.Logger `yaml:"-"`
	// Registerer receives the monitor's gauges. Nil registers nothing.
	Registerer prometheus.Registerer `yaml:"-"`
}

// On says whether the monitor runs.
func (c Config) On() bool { return c.Enabled == nil || *c.Enabled }

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Interval == 0 {
		c.Interval = 5 * time.Minute
	}
	if c.SampleSize == 0 {
		c.SampleSize = 64
	}
	if c.UniformShare == 0 {
		c.UniformShare = 0.25
	}
	if c.CosineBound == 0 {
		c.CosineBound = DefaultCosineBound
	}
	if c.L2Threshold == 0 {
		c.L2Threshold = 0.008
	}
	if c.MaxShareOverBound == 0 {
		c.MaxShareOverBound = 0.1
	}
	if c.MaxTokensPerHour == 0 {
		c.MaxTokensPerHour = 100000
	}
	if c.ReferenceSize == 0 {
		c.ReferenceSize = 2000
	}
	if c.WindowSize == 0 {
		c.WindowSize = 2000
	}
	if c.QueryReferenceSize == 0 {
		c.QueryReferenceSize = 1000
	}
	if c.Components == 0 {
		c.Components = 3
	}
	if c.Topic == "" {
		c.Topic = "ragsync.monitor"
	}
	if c.StreamMaxLen == 0 {
		c.StreamMaxLen = 10000
	}
	if c.DrainTarget == 0 {
		c.DrainTarget = 5 * time.Minute
	}
	if c.BudgetBoundShare == 0 {
		c.BudgetBoundShare = DefaultBudgetBoundShare
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field at once, by its YAML path.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Interval < time.Second {
		add("monitor.interval: %s is too short, use at least 1s (e.g. 5m)", c.Interval)
	}
	if c.UniformShare < 0 || c.UniformShare > 1 {
		add("monitor.uniform_share: %g must be between 0 and 1", c.UniformShare)
	}
	if c.CosineBound <= 0 || c.CosineBound >= 2 {
		add("monitor.cosine_bound: %g must be in (0, 2), e.g. 0.05", c.CosineBound)
	}
	if c.L2Threshold <= 0 {
		add("monitor.l2_threshold: %g must be > 0, e.g. 0.008", c.L2Threshold)
	}
	if c.MaxShareOverBound <= 0 || c.MaxShareOverBound > 1 {
		add("monitor.max_share_over_bound: %g must be in (0, 1], e.g. 0.1", c.MaxShareOverBound)
	}
	if c.MaxTokensPerHour < 0 {
		add("monitor.max_tokens_per_hour: must be > 0, e.g. 100000")
	}
	if c.ReferenceSize < 50 {
		add("monitor.reference_size: %d is too small to compare distributions, use at least 50 (default 2000)", c.ReferenceSize)
	}
	if c.WindowSize < 50 {
		add("monitor.window_size: %d is too small to compare distributions, use at least 50 (default 2000)", c.WindowSize)
	}
	if c.QueryReferenceSize < 50 {
		add("monitor.query_reference_size: %d is too small to compare distributions, use at least 50 (default 1000)", c.QueryReferenceSize)
	}
	if c.Components < 0 || c.Components > 8 {
		add("monitor.components: %d must be 0..8 (default 3)", c.Components)
	}
	if c.StreamMaxLen < 1 {
		add("monitor.stream_max_len: must be > 0 (default 10000)")
	}
	if c.MaxReplicas < 0 {
		add("monitor.max_replicas: must be >= 0 (0: the partition count)")
	}
	if c.BudgetBoundShare < 0 {
		add("monitor.budget_bound_share: %g must be > 0, e.g. 0.25 (seconds waited per second)", c.BudgetBoundShare)
	}
	for i, s := range c.Canaries {
		if s == "" {
			add("monitor.canaries[%d]: empty text; remove it or write a probe sentence", i)
		}
	}
	return errors.Join(errs...)
}
