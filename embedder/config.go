package embedder

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/internal/redact"
)

// Providers accepted in Config.Provider.
const (
	ProviderOpenAI  = "openai"
	ProviderHashing = "hashing"
)

// API types accepted in Config.APIType.
const (
	APITypeOpenAI = "openai"
	APITypeAzure  = "azure"
)

// HashingModel is the model name of the Hashing embedder. It is versioned
// because stored vectors are only comparable with vectors of the same
// feature set.
const HashingModel = "hashing-v1"

const defaultBaseURL = "https://api.openai.com/v1"

// Values of Config.EncodingFormat.
const (
	EncodingAuto   = "auto"
	EncodingFloat  = "float"
	EncodingBase64 = "base64"
)

// Values of Config.SendDimensions.
const (
	SendDimensionsAuto   = "auto"
	SendDimensionsAlways = "always"
	SendDimensionsNever  = "never"
)

// Config is the embedder section of ragsync.yaml.
type Config struct {
	// Provider is "openai" (any OpenAI-compatible endpoint) or "hashing"
	// (offline). There is no default: the choice decides what the index
	// holds.
	Provider string `yaml:"provider"`
	// BaseURL is the API root that "/embeddings" is appended to, e.g.
	// http://localhost:11434/v1 for Ollama. Defaults to
	// https://api.openai.com/v1.
	BaseURL string `yaml:"base_url"`
	// APIType is "openai" or "azure" (api-key header, deployment URLs; Model
	// is the deployment name). Defaults to "openai".
	APIType string `yaml:"api_type"`
	// APIVersion is the Azure api-version query parameter. Defaults to
	// 2024-02-01 when APIType is "azure".
	APIVersion string `yaml:"api_version"`
	// Model is the embedding model; required for openai. Defaults to
	// "hashing-v1" for hashing, the only model it has.
	Model string `yaml:"model"`
	// Dimensions is the vector size the index stores; required, > 0.
	// Whether it is sent to the API (which then shortens vectors) is
	// SendDimensions' choice.
	Dimensions int `yaml:"dimensions"`
	// SendDimensions says whether requests carry "dimensions": "always",
	// "never", or "auto": only when Model starts with "text-embedding-3"
	// (OpenAI's and Azure's models that shorten vectors on request; older
	// models and most self-hosted servers refuse the field with a 400).
	// Set "always" for a server that honours it under another model name,
	// "never" for one that refuses it. Provider openai only. Defaults to
	// "auto".
	SendDimensions string `yaml:"send_dimensions"`
	// MaxResponseBytes caps the size of one response body; a larger one
	// is refused after reading that much (a misbehaving server cannot
	// exhaust memory) and its inputs are narrowed like any bad answer.
	// Defaults to 0: 4 × (4096 + inputs × (256 + Dimensions × 24)) for
	// each request, four times the largest honest answer in JSON floats
	// (base64 answers are about a quarter of that).
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// APIKey authenticates to the API; set it as ${OPENAI_API_KEY} so it
	// stays out of files. It is redacted when the config is logged.
	APIKey string `yaml:"api_key"`
	// APIKeyUnset names the environment variable that api_key referred to
	// as ${VAR} and that was not set when the file was loaded (config.Load
	// records it; "" otherwise). An empty APIKey for a server that needs a
	// key is then refused naming the variable, instead of being sent and
	// answered with a 401.
	APIKeyUnset string `yaml:"-"`
	// MaxBatchInputs caps the texts per request. Defaults to 256 (OpenAI
	// allows 2048).
	MaxBatchInputs int `yaml:"max_batch_inputs"`
	// MaxBatchTokens caps the cl100k_base tokens per request. Defaults to
	// 250000 (OpenAI allows 300000).
	MaxBatchTokens int `yaml:"max_batch_tokens"`
	// Timeout bounds one request attempt. Defaults to 60s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries is how many times a failed request is retried after the
	// first attempt. Defaults to 5; a negative value disables retries.
	MaxRetries int `yaml:"max_retries"`
	// RequestsPerMinute caps requests sent (retries included) with a token
	// bucket of one second's worth. Defaults to 0: no client-side limit.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// TokensPerMinute caps cl100k_base tokens sent, with a bucket of ten
	// seconds' worth; MaxBatchTokens is lowered to that bucket. Defaults to
	// 0: no client-side limit.
	TokensPerMinute int `yaml:"tokens_per_minute"`
	// MaxInputTokens is the model's per-input limit (8191 for OpenAI's
	// embedding models). Longer inputs are truncated or dead-lettered, as
	// OnTooLong says. Defaults to 8191.
	MaxInputTokens int `yaml:"max_input_tokens"`
	// OnTooLong is "truncate" (keep the first MaxInputTokens tokens, count
	// it in ragsync_embedder_inputs_truncated_total) or "dead_letter" (fail
	// permanently, so the change goes to the dead-letter topic). Defaults
	// to "truncate".
	OnTooLong string `yaml:"on_too_long"`
	// Linger is how long serve lets the oldest text waiting for a request
	// wait for texts of other documents, so that documents in flight share
	// requests (see Coalescer); a full request goes at once. Provider
	// openai only. Defaults to 20ms.
	Linger time.Duration `yaml:"linger"`
	// MaxRequestsInFlight bounds the requests a pipeline (serve,
	// backfill, reindex) has sent and not yet had answered; while all the
	// requests allowed are busy, texts queue and leave together. 4 are
	// allowed whatever they carry; more only while full requests wait, up
	// to the provider's observed latency ÷ Linger, within RequestsPerMinute
	// and TokensPerMinute (see CoalesceConfig.MaxInFlight). Provider openai
	// only. Defaults to 32.
	MaxRequestsInFlight int `yaml:"max_requests_in_flight"`
	// EncodingFormat is how the API sends vectors: "float" (JSON numbers)
	// or "base64" (little-endian float32s, what OpenAI's own clients ask
	// for): decoding JSON floats was about a third of serve's CPU during a
	// load. "auto" asks for base64 and, the first time the
	// server answers with numbers or refuses the parameter, switches to
	// float for good: OpenAI, Azure and most compatible servers get the
	// cheap format, and the others keep working. "base64" fails such a
	// server with an error naming the fix. Provider openai only. Defaults
	// to "auto".
	EncodingFormat string `yaml:"encoding_format"`
	// Budget shares RequestsPerMinute, TokensPerMinute and a bound on
	// requests in flight between every process that uses the API key,
	// through Redis, with priority lanes. Without budget.redis_url the
	// limits hold per process. Defaults to no shared budget.
	Budget BudgetConfig `yaml:"budget"`
	// Batch is the optional batch lane of reindex and backfill (see
	// BatchConfig).
	Batch BatchConfig `yaml:"batch"`

	// Lane is the budget lane of calls whose context names none (WithLane
	// wins): serve leaves LaneLive; backfill, reindex and repair set
	// LaneBackfill. Defaults to LaneLive.
	Lane Lane `yaml:"-"`
	// Logger receives the client's warnings (the encoding fallback); the
	// caller routes it through the redactor. nil discards them.
	Logger *slog.Logger `yaml:"-"`
	// Registerer, when not nil, receives a remote client's request
	// metrics (New registers them).
	Registerer prometheus.Registerer `yaml:"-"`
}

// NeedsKey reports whether the server at BaseURL is likely to need an API
// key: Azure, and any host that is not this machine, a private or
// link-local address, a bare name (a compose service such as "ollama") or
// a .local/.internal name. Local servers (Ollama, vLLM, TEI) often take
// none.
func (c Config) NeedsKey() bool {
	if c.APIType == APITypeAzure {
		return true
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if ip, err := netip.ParseAddr(host); err == nil {
		return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return false
	}
	for _, suffix := range []string{".localhost", ".local", ".internal", ".lan", ".home.arpa"} {
		if strings.HasSuffix(host, suffix) {
			return false
		}
	}
	return true
}

// SendsDimensions reports whether requests carry "dimensions" under
// SendDimensions (see there for what "auto" decides).
func (c Config) SendsDimensions() bool {
	switch c.SendDimensions {
	case SendDimensionsAlways:
		return true
	case SendDimensionsNever:
		return false
	}
	return strings.HasPrefix(c.Model, "text-embedding-3")
}

// responseCap is the largest response body accepted for a request of n
// inputs: MaxResponseBytes, or by default four times the largest honest
// answer as JSON floats (about 24 bytes a number at worst, 256 bytes of
// fields per vector, 4 KiB around them).
func (c Config) responseCap(n int) int64 {
	if c.MaxResponseBytes > 0 {
		return c.MaxResponseBytes
	}
	return 4 * (4096 + int64(n)*(256+int64(c.Dimensions)*24))
}

// Coalesce returns the Coalescer settings of c.
func (c Config) Coalesce() CoalesceConfig {
	return CoalesceConfig{Linger: c.Linger, MaxInFlight: c.MaxRequestsInFlight,
		RequestsPerMinute: c.RequestsPerMinute, TokensPerMinute: c.TokensPerMinute,
		MaxBatchInputs: c.MaxBatchInputs, MaxBatchTokens: c.MaxBatchTokens, Lane: c.Lane}
}

// BudgetConfig returns c.Budget with its defaults (its Key is derived
// from BaseURL and APIKey, so it is left out of WithDefaults and of the
// logged config). Call it on the result of WithDefaults.
func (c Config) BudgetConfig() BudgetConfig {
	return c.Budget.withDefaults(c.BaseURL, c.APIKey)
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = defaultBaseURL
	}
	if c.APIType == "" {
		c.APIType = APITypeOpenAI
	}
	if c.APIType == APITypeAzure && c.APIVersion == "" {
		c.APIVersion = "2024-02-01"
	}
	if c.Provider == ProviderHashing && c.Model == "" {
		c.Model = HashingModel
	}
	if c.MaxBatchInputs == 0 {
		c.MaxBatchInputs = 256
	}
	if c.MaxBatchTokens == 0 {
		c.MaxBatchTokens = 250_000
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 5
	}
	if c.MaxInputTokens == 0 {
		c.MaxInputTokens = 8191
	}
	if c.OnTooLong == "" {
		c.OnTooLong = TooLongTruncate
	}
	if c.Linger == 0 {
		c.Linger = 20 * time.Millisecond
	}
	if c.MaxRequestsInFlight == 0 {
		c.MaxRequestsInFlight = 32
	}
	if c.EncodingFormat == "" {
		c.EncodingFormat = EncodingAuto
	}
	if c.SendDimensions == "" {
		c.SendDimensions = SendDimensionsAuto
	}
	c.Batch = c.Batch.withDefaults()
	return c
}

// Validate reports every problem of c at once, each naming its yaml path
// and the fix. Call it on the result of WithDefaults.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Provider {
	case ProviderOpenAI:
		if c.Model == "" {
			add("embedder.model: required for provider openai, e.g. text-embedding-3-small")
		}
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("embedder.base_url: %q is not an http(s) URL, e.g. https://api.openai.com/v1", c.BaseURL)
		} else if c.APIKey == "" && c.APIKeyUnset != "" && c.NeedsKey() {
			add("embedder.api_key: ${%s} is not set in the environment, so no key would be sent to %s; export %s=<your key> (or write api_key: \"\" if this server takes none)",
				c.APIKeyUnset, u.Hostname(), c.APIKeyUnset)
		} else if c.APIKey == "" && strings.HasSuffix(u.Hostname(), "openai.com") {
			add("embedder.api_key: required for %s, set OPENAI_API_KEY and api_key: ${OPENAI_API_KEY}", u.Hostname())
		}
		switch c.APIType {
		case APITypeAzure:
			if c.BaseURL == defaultBaseURL {
				add("embedder.base_url: set it to your Azure OpenAI endpoint, e.g. https://NAME.openai.azure.com")
			}
		case APITypeOpenAI:
		default:
			add("embedder.api_type: %q is not an API type, use %q or %q", c.APIType, APITypeOpenAI, APITypeAzure)
		}
	case ProviderHashing:
		if c.Model != HashingModel {
			add("embedder.model: provider hashing only has model %q, got %q", HashingModel, c.Model)
		}
	case "":
		add("embedder.provider: required, use %q or %q", ProviderOpenAI, ProviderHashing)
	default:
		add("embedder.provider: %q is not a provider, use %q or %q", c.Provider, ProviderOpenAI, ProviderHashing)
	}
	switch {
	case c.Dimensions > 0:
	case c.Provider == ProviderHashing:
		add("embedder.dimensions: must be > 0, got %d; the offline hashing embedder takes any size (default 384), the same for every run of one index", c.Dimensions)
	default:
		add("embedder.dimensions: must be > 0, set it to the model's output size (1536 for text-embedding-3-small), got %d", c.Dimensions)
	}
	if c.MaxBatchInputs < 1 || c.MaxBatchInputs > 2048 {
		add("embedder.max_batch_inputs: must be in 1..2048, got %d", c.MaxBatchInputs)
	}
	if c.MaxBatchTokens < 1 {
		add("embedder.max_batch_tokens: must be > 0, got %d", c.MaxBatchTokens)
	}
	if c.RequestsPerMinute < 0 {
		add("embedder.requests_per_minute: must be >= 0 (0: no limit), got %d", c.RequestsPerMinute)
	}
	if c.TokensPerMinute < 0 {
		add("embedder.tokens_per_minute: must be >= 0 (0: no limit), got %d", c.TokensPerMinute)
	}
	if c.MaxInputTokens < 1 {
		add("embedder.max_input_tokens: must be > 0 (8191 for OpenAI models), got %d", c.MaxInputTokens)
	}
	if c.OnTooLong != TooLongTruncate && c.OnTooLong != TooLongDeadLetter {
		add("embedder.on_too_long: %q is not %q or %q", c.OnTooLong, TooLongTruncate, TooLongDeadLetter)
	}
	if c.Linger < 0 || c.Linger > 10*time.Second {
		add("embedder.linger: must be in (0, 10s], e.g. 20ms (it delays every document that waits for a vector), got %s", c.Linger)
	}
	if c.MaxRequestsInFlight < 1 || c.MaxRequestsInFlight > 256 {
		add("embedder.max_requests_in_flight: must be in 1..256, e.g. 32 (more than 4 go only while full requests wait), got %d", c.MaxRequestsInFlight)
	}
	if c.EncodingFormat != EncodingAuto && c.EncodingFormat != EncodingFloat && c.EncodingFormat != EncodingBase64 {
		add("embedder.encoding_format: %q is not %q, %q or %q", c.EncodingFormat, EncodingAuto, EncodingFloat, EncodingBase64)
	}
	switch c.SendDimensions {
	case SendDimensionsAuto, SendDimensionsAlways, SendDimensionsNever:
	default:
		add("embedder.send_dimensions: %q is not %q, %q or %q", c.SendDimensions, SendDimensionsAuto, SendDimensionsAlways, SendDimensionsNever)
	}
	if c.MaxResponseBytes < 0 {
		add("embedder.max_response_bytes: must be >= 0 (0: four times the largest answer a request can honestly get), got %d", c.MaxResponseBytes)
	}
	if c.Timeout < 0 {
		add("embedder.timeout: must be > 0, e.g. 60s, got %s", c.Timeout)
	}
	errs = append(errs, c.BudgetConfig().validate()...)
	errs = append(errs, c.Batch.validate(c)...)
	return errors.Join(errs...)
}

// LogValue implements slog.LogValuer so that logging a Config never leaks
// the API key.
func (c Config) LogValue() slog.Value {
	key := ""
	if c.APIKey != "" {
		key = redact.Mask
	}
	return slog.GroupValue(
		slog.String("provider", c.Provider), slog.String("base_url", c.BaseURL),
		slog.String("api_type", c.APIType), slog.String("model", c.Model),
		slog.Int("dimensions", c.Dimensions), slog.String("api_key", key),
		slog.Int("max_batch_inputs", c.MaxBatchInputs), slog.Int("max_batch_tokens", c.MaxBatchTokens),
		slog.Duration("timeout", c.Timeout), slog.Int("max_retries", c.MaxRetries),
		slog.Int("requests_per_minute", c.RequestsPerMinute), slog.Int("tokens_per_minute", c.TokensPerMinute),
		slog.Int("max_input_tokens", c.MaxInputTokens), slog.String("on_too_long", c.OnTooLong),
		slog.Duration("linger", c.Linger), slog.Int("max_requests_in_flight", c.MaxRequestsInFlight),
		slog.String("encoding_format", c.EncodingFormat), slog.String("send_dimensions", c.SendDimensions),
		slog.Int64("max_response_bytes", c.MaxResponseBytes),
		slog.String("budget_redis_url", redact.String(c.Budget.RedisURL)), slog.String("budget_key", c.Budget.Key),
		slog.Int("budget_max_concurrency", c.Budget.MaxConcurrency), slog.String("lane", c.Lane.String()),
		slog.Bool("batch_enabled", c.Batch.Enabled), slog.Duration("batch_poll_interval", c.Batch.PollInterval),
	)
}

// String redacts the API key, for %v and %s.
func (c Config) String() string {
	if c.APIKey != "" {
		c.APIKey = redact.Mask
	}
	c.Budget.RedisURL = redact.String(c.Budget.RedisURL)
	c.Logger, c.Registerer = nil, nil
	type plain Config // no String method: avoids recursion
	return fmt.Sprintf("%+v", plain(c))
}
