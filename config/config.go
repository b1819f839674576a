// Package config is ragsync.yaml: its schema, defaults, loading (file,
// ${VAR} expansion, RAGSYNC_* variables, --set overrides), validation with
// every problem named by its YAML path, did-you-mean for unknown keys, and
// the conversion of each section into the configuration of the room that
// reads it.
package config

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/suggest"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// Config is ragsync.yaml. Names are a contract (DESIGN.md): add fields,
// never rename.
type Config struct {
	Source   SourceConfig    `yaml:"source"`
	Tables   []TableConfig   `yaml:"tables"`
	Chunker  ChunkerConfig   `yaml:"chunker"`
	Embedder embedder.Config `yaml:"embedder"`
	Postgres PostgresConfig  `yaml:"postgres"`
	Index    string          `yaml:"index"`
	// IndexType is how a new index stores and indexes its vectors: vector,
	// halfvec or bit (sink.VectorType), fixed when the index is created.
	// Empty: vector for a new index, and an existing one keeps its own
	// (after ragsync reindex --index-type and a promote, a config that
	// names no type keeps working).
	IndexType string `yaml:"index_type"`
	// HNSW are a new index's HNSW parameters and its query-time search
	// settings (0: the default).
	HNSW HNSWConfig `yaml:"hnsw"`
	// IndexPoll is how often serve reads the aliases and index states:
	// within it, a new shadow index (ragsync reindex) starts receiving
	// every change and an alias moved by ragsync index promote or
	// rollback switches the front door. Defaults to 2s.
	IndexPoll time.Duration   `yaml:"index_poll"`
	Pipeline  PipelineConfig  `yaml:"pipeline"`
	FrontDoor FrontDoorConfig `yaml:"frontdoor"`
	DLQ       DLQConfig       `yaml:"dlq"`
	HTTP      HTTPConfig      `yaml:"http"`
	Log       LogConfig       `yaml:"log"`
	Reuse     ReuseConfig     `yaml:"reuse"`
	Purge     PurgeConfig     `yaml:"purge"`
	Backfill  BackfillConfig  `yaml:"backfill"`
	Monitor   monitor.Config  `yaml:"monitor"`
	Freshness FreshnessConfig `yaml:"freshness"`
}

type SourceConfig struct {
	Kind     string               `yaml:"kind"`
	Kafka    KafkaSourceConfig    `yaml:"kafka"`
	File     FileSourceConfig     `yaml:"file"`
	Postgres PostgresSourceConfig `yaml:"postgres"`
	// RedisStreams is Debezium Server's Redis sink (source.kind:
	// redis-streams): the streams it writes, read in a consumer group.
	RedisStreams RedisStreamsSourceConfig `yaml:"redis_streams"`
	// Moves records when a Debezium connector's database moved to a
	// server whose positions restarted (a restore, an upgrade, another
	// server under the same connector name): its changes committed from At
	// on win over the old server's whatever their positions. Defaults to
	// none. The Postgres source notices a move itself (serve --adopt-source).
	Moves []SourceMoveConfig `yaml:"moves"`
}

// SourceMoveConfig is one entry of source.moves.
type SourceMoveConfig struct {
	// Source is the source the versions name, "dbz:<server>/<database>"
	// (the refusal that asks for the entry prints it).
	Source string `yaml:"source"`
	// At is the commit time of the new server's first change (RFC 3339).
	At time.Time `yaml:"at"`
}

type KafkaSourceConfig struct {
	Brokers        []string `yaml:"brokers"`
	Topics         []string `yaml:"topics"`
	Group          string   `yaml:"group"`
	MaxPollRecords int      `yaml:"max_poll_records"`
	// MaxPollBytes and FetchMaxBytes bound memory: one buffered fetch plus
	// the batch in flight. Both default to 16 MiB.
	MaxPollBytes   int           `yaml:"max_poll_bytes"`
	FetchMaxBytes  int           `yaml:"fetch_max_bytes"`
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RevokeTimeout bounds how long a rebalance waits for the batches of a
	// partition being taken away to be applied and committed. Defaults to
	// 30s.
	RevokeTimeout time.Duration `yaml:"revoke_timeout"`
	// Registry is the schema registry of topics written with the Avro,
	// Protobuf or JSON Schema converter; without a URL only the JSON
	// converter's records decode.
	Registry RegistryConfig `yaml:"registry"`
}

// RegistryConfig is source.kafka.registry: a Confluent-compatible schema
// registry (Confluent's, Apicurio's compatible API, Redpanda's, Karapace).
// Records in its wire format are told from JSON by their first byte, and
// each schema id is fetched once and kept.
type RegistryConfig struct {
	// URL is the registry's base URL, e.g. http://schema-registry:8081.
	URL string `yaml:"url"`
	// Username and Password are HTTP basic auth (Confluent Cloud: the API
	// key and secret). Use ${VAR} or RAGSYNC_SOURCE_KAFKA_REGISTRY_PASSWORD
	// rather than writing the password in the file.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// BearerToken is sent as "Authorization: Bearer …" instead of basic auth.
	BearerToken string `yaml:"bearer_token"`
	// CAFile is a PEM bundle of the CAs the registry's certificate is
	// checked against (default: the system's); CertFile and KeyFile are a
	// client certificate for mutual TLS.
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	// Timeout bounds one request to the registry. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// set reports whether any registry setting is given.
func (r RegistryConfig) set() bool { return r != RegistryConfig{} }

// validate checks source.kafka.registry, naming each setting and its fix.
func (r RegistryConfig) validate() []error {
	if !r.set() {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	u, err := url.Parse(r.URL)
	switch {
	case r.URL == "":
		add("source.kafka.registry.url: set the schema registry's URL, e.g. http://schema-registry:8081 (the other registry settings need it)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		add("source.kafka.registry.url: %q is not an http(s) URL; write e.g. http://schema-registry:8081", r.URL)
	}
	if r.BearerToken != "" && (r.Username != "" || r.Password != "") {
		add("source.kafka.registry: set bearer_token or username/password, not both")
	}
	if (r.Username == "") != (r.Password == "") {
		add("source.kafka.registry: basic auth needs both username and password")
	}
	if (r.CertFile == "") != (r.KeyFile == "") {
		add("source.kafka.registry: a client certificate needs both cert_file and key_file")
	}
	for _, f := range []struct{ name, path string }{{"ca_file", r.CAFile}, {"cert_file", r.CertFile}, {"key_file", r.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			add("source.kafka.registry.%s: %v", f.name, err)
		}
	}
	if r.Timeout < 0 {
		add("source.kafka.registry.timeout: must not be negative (default 10s)")
	}
	return errs
}

// RedisStreamsSourceConfig is source.redis_streams: every setting of
// redisstream.Config (see there for the defaults).
type RedisStreamsSourceConfig struct {
	URL            string        `yaml:"url"`
	Streams        []string      `yaml:"streams"`
	Group          string        `yaml:"group"`
	Consumer       string        `yaml:"consumer"`
	MaxPollRecords int           `yaml:"max_poll_records"`
	Block          time.Duration `yaml:"block"`
	ClaimIdle      time.Duration `yaml:"claim_idle"`
	Start          string        `yaml:"start"`
	// NullKey and NullValue are Debezium Server's
	// debezium.sink.redis.null.key and null.value; both default to
	// "default", as there.
	NullKey   string `yaml:"null_key"`
	NullValue string `yaml:"null_value"`
}

type FileSourceConfig struct {
	Path   string `yaml:"path"`
	Follow bool   `yaml:"follow"`
}

type PostgresSourceConfig struct {
	URL                   string `yaml:"url"`
	Publication           string `yaml:"publication"`
	Slot                  string `yaml:"slot"`
	PostgresSourceOptions `yaml:",inline"`
}

type TableConfig struct {
	Match    string   `yaml:"match"`
	ID       []string `yaml:"id"`
	Text     string   `yaml:"text"`
	Metadata []string `yaml:"metadata"`
	// Fields are declared metadata fields, each a template over the row
	// like Text ("{{category}}/{{kind}}", or a constant), rendered into
	// the document's metadata beside the Metadata columns: filterable by
	// query --filter and the front door, and updated without re-embedding
	// when the text is unchanged.
	Fields map[string]string `yaml:"fields"`
	Tenant string            `yaml:"tenant"`
}

type ChunkerConfig struct {
	Strategy     string `yaml:"strategy"`
	TargetTokens int    `yaml:"target_tokens"`
	MinTokens    int    `yaml:"min_tokens"`
	MaxTokens    int    `yaml:"max_tokens"`
	// RefineTargetTokens is the size an update cuts the chunks it changes
	// into (chunker.Config.RefineTargetTokens): 0 the default, -1 off.
	RefineTargetTokens int `yaml:"refine_target_tokens"`
}

type PostgresConfig struct {
	URL    string `yaml:"url"`
	Schema string `yaml:"schema"`
	// FullText writes each chunk's tsvector (and so its GIN index entry),
	// which only the front door's degraded full-text answers read; off,
	// those answers fail with "full text is off" instead.
	// Switching it on fills the missing values at the next start.
	// Defaults to frontdoor.enabled.
	FullText *bool `yaml:"full_text"`
}

// fullText is postgres.full_text with its default.
func (c Config) FullText() bool {
	if c.Postgres.FullText != nil {
		return *c.Postgres.FullText
	}
	return c.FrontDoor.Enabled
}

// HNSWConfig is hnsw: the HNSW parameters of the index (sink.HNSW) and
// the bit index's re-rank candidates. 0 is the default everywhere: 16, 64
// and 40 (pgvector's), and sink's candidate default.
type HNSWConfig struct {
	// M and EfConstruction are fixed when the index is built; another
	// value for an existing index is refused, naming ragsync reindex.
	M              int `yaml:"m"`
	EfConstruction int `yaml:"ef_construction"`
	// EfSearch is the candidate list of a query: recorded on the index by
	// its writers, read by every query (raised to k when k is larger).
	EfSearch int `yaml:"ef_search"`
	// RerankCandidates is, for index_type bit only, how many candidates
	// the bit index yields for the re-rank on the full vectors.
	RerankCandidates int `yaml:"rerank_candidates"`
}

// VectorType is index_type as the sink names it; "" when unset (a new
// index is vector, an existing one keeps its own).
func (c Config) VectorType() sink.VectorType {
	if c.IndexType == "" {
		return ""
	}
	return sink.VectorType(c.IndexType)
}

// SinkHNSW is hnsw: as the sink takes it (0: the default, or the
// existing index's).
func (c Config) SinkHNSW() sink.HNSW {
	return sink.HNSW{M: c.HNSW.M, EfConstruction: c.HNSW.EfConstruction, EfSearch: c.HNSW.EfSearch}
}

// validateIndexType checks index_type, hnsw: and embedder.dimensions
// against the type's limit, each error naming the setting that fixes it.
func (c Config) validateIndexType() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	t, err := sink.ParseVectorType(c.IndexType)
	if err != nil {
		add("index_type: %q is not one of vector (the default), halfvec, bit", c.IndexType)
	} else if c.Embedder.Dimensions > sink.MaxDimensionsFor(t) {
		errs = append(errs, sink.TypeErrors(t, c.Embedder.Dimensions, 0)...)
	}
	h := c.HNSW
	errs = append(errs, c.SinkHNSW().Errors()...)
	switch {
	case h.RerankCandidates < 0:
		add("hnsw.rerank_candidates: %d must not be negative (0 means the default)", h.RerankCandidates)
	case h.RerankCandidates > sink.MaxCandidates:
		add("hnsw.rerank_candidates: %d must be at most %d (0 means the default)", h.RerankCandidates, sink.MaxCandidates)
	case h.RerankCandidates > 0 && err == nil && t != sink.TypeBit:
		add("hnsw.rerank_candidates: only an index_type bit index re-ranks candidates; remove it, or set index_type: bit")
	}
	return errs
}

type PipelineConfig struct {
	Workers int `yaml:"workers"`
	// StallAfter is how long a batch may be retried before /readyz fails.
	StallAfter time.Duration `yaml:"stall_after"`
	// StallLogInterval is how often a stall is summarised in the log
	// (what fails, since when, the setting to check). Defaults to 30s.
	StallLogInterval time.Duration `yaml:"stall_log_interval"`
	// Dead-letter guard and document size bounds (pipeline.go).
	PipelineLimits `yaml:",inline"`
}

// FrontDoorConfig is the Redis Stream query front door: enabled, plus every
// fallback.Config setting (redis_url, prefix, workers, cache_ttl, …).
type FrontDoorConfig struct {
	Enabled         bool `yaml:"enabled"`
	fallback.Config `yaml:",inline"`
}

type DLQConfig struct {
	// Topic overrides the Kafka dead-letter topic; default "<topic>.ragsync-dlq".
	Topic string `yaml:"topic"`
	// Path is the dead-letter file for the file source; default "<path>.dlq.jsonl".
	Path string `yaml:"path"`
}

type HTTPConfig struct {
	Listen string `yaml:"listen"`
}

type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// defaultConfig is what a user gets with no file at all: the offline
// embedder against the local Postgres, so `ragsync inspect` and the demo
// need no setup.
func Default() Config {
	return Config{
		Source:   SourceConfig{Kind: "kafka", Kafka: KafkaSourceConfig{Group: "ragsync"}},
		Chunker:  ChunkerConfig{Strategy: "content-defined", TargetTokens: 512, MinTokens: 128, MaxTokens: 1024},
		Embedder: embedder.Config{Provider: "hashing", Dimensions: 384},
		Postgres: PostgresConfig{URL: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", Schema: "ragsync"},
		Index:    "default",
		HTTP:     HTTPConfig{Listen: "127.0.0.1:9464"},
		Log:      LogConfig{Level: "info"},
	}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} and ${VAR:-default}; a $ not followed by { is
// left alone so passwords and templates survive.
func expandEnv(s string) (string, []string) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := envRef.FindStringSubmatch(ref)
		if v, ok := os.LookupEnv(m[1]); ok {
			return v
		}
		if m[2] != "" {
			return m[3]
		}
		missing = append(missing, m[1])
		return ""
	})
	return out, missing
}

// unsetIn returns the first of the unset variables that the scalar at
// path in the unexpanded file refers to as ${VAR} (without a default), or
// "" when it refers to none of them.
func unsetIn(raw []byte, unset []string, path ...string) string {
	if len(unset) == 0 {
		return ""
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return ""
	}
	n := doc.Content[0]
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return ""
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return ""
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode {
		return ""
	}
	for _, m := range envRef.FindAllStringSubmatch(n.Value, -1) {
		if m[2] == "" && slices.Contains(unset, m[1]) {
			return m[1]
		}
	}
	return ""
}

// loadConfig reads the file (if any), expands ${VAR}, then applies RAGSYNC_*
// environment variables and finally the --set overrides, so flags win.
func Load(path string, sets []string) (Config, error) {
	cfg := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w (pass --config with the path of your ragsync.yaml)", err)
		}
		expanded, unset := expandEnv(string(raw))
		cfg.Embedder.APIKeyUnset = unsetIn(raw, unset, "embedder", "api_key")
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(expanded), &doc); err == nil {
			if err := unknownKeys(&doc); err != nil {
				return cfg, fmt.Errorf("parse %s:\n%w", path, err)
			}
		}
		dec := yaml.NewDecoder(strings.NewReader(expanded))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file means all defaults
			return cfg, fmt.Errorf("parse %s: %w", path, err)
		}
	}
	var errs []error
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, "RAGSYNC_")
		if !ok || name == "CONFIG" {
			continue
		}
		if err := setPath(&cfg, strings.ToLower(name), v, true); err != nil {
			if s := suggest.Nearest(strings.ToLower(name), envNames(reflect.TypeOf(cfg), "", nil)); s != "" && errors.Is(err, errUnknownSetting) {
				err = fmt.Errorf("%w; did you mean RAGSYNC_%s?", err, strings.ToUpper(s))
			}
			errs = append(errs, fmt.Errorf("environment %s: %w", k, err))
		} else if strings.EqualFold(name, "EMBEDDER_API_KEY") {
			cfg.Embedder.APIKeyUnset = "" // the key was given here
		}
	}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("--set %q: want path=value, e.g. --set embedder.model=text-embedding-3-large", s))
			continue
		}
		if err := setPath(&cfg, k, v, false); err != nil {
			errs = append(errs, fmt.Errorf("--set %s: %w", k, err))
		} else if k == "embedder.api_key" {
			cfg.Embedder.APIKeyUnset = "" // the key was given here, empty or not
		}
	}
	return cfg, errors.Join(errs...)
}

// setPath sets the field at a yaml path ("embedder.api_key"). From the
// environment the separators are underscores too (RAGSYNC_EMBEDDER_API_KEY),
// so the path is matched greedily against the yaml names.
func setPath(cfg *Config, path, value string, underscores bool) error {
	v := reflect.ValueOf(cfg).Elem()
	rest := path
	for {
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("%w %q", errUnknownSetting, path)
		}
		field, remaining, ok := matchField(v, rest, underscores)
		if !ok {
			return unknownSetting(v, path, rest, underscores)
		}
		v = field
		if remaining == "" {
			return setValue(v, value)
		}
		rest = remaining
	}
}

func matchField(v reflect.Value, path string, underscores bool) (reflect.Value, string, bool) {
	t := v.Type()
	// Longest name first so "max_batch_tokens" wins over "max".
	type cand struct {
		name string
		i    int
	}
	var cands []cand
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" && opts == "inline" {
			// An inlined struct's fields sit at this level of the YAML.
			if f, rest, ok := matchField(v.Field(i), path, underscores); ok {
				return f, rest, true
			}
			continue
		}
		if name != "" {
			cands = append(cands, cand{name, i})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return len(b.name) - len(a.name) })
	for _, c := range cands {
		if path == c.name {
			return v.Field(c.i), "", true
		}
		sep := "."
		if underscores {
			sep = "_"
		}
		if rest, ok := strings.CutPrefix(path, c.name+sep); ok {
			return v.Field(c.i), rest, true
		}
	}
	return reflect.Value{}, "", false
}

func setValue(v reflect.Value, s string) error {
	switch {
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration like 30s: %w", err)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		v.SetFloat(f)
	case v.Kind() == reflect.Pointer:
		// Optional settings are pointers so "absent" differs from zero.
		p := reflect.New(v.Type().Elem())
		if err := setValue(p.Elem(), s); err != nil {
			return err
		}
		v.Set(p)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var parts []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return errors.New("cannot be set from a string; set it in the YAML file")
	}
	return nil
}

var IndexName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,40}$`)

// fieldName is what a declared metadata field may be called.
var fieldName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,62}$`)

// validate reports every problem at once, each naming the field and the fix.
func (c Config) Validate(needSource bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if needSource {
		errs = append(errs, c.validateSource()...)
	}
	for i, m := range c.Source.Moves {
		if !strings.HasPrefix(m.Source, "dbz:") {
			add("source.moves[%d].source: %q: name a Debezium source as the refusal printed it, dbz:<server>/<database> (the Postgres source notices a move itself: serve --adopt-source)", i, m.Source)
		}
		if m.At.IsZero() {
			add("source.moves[%d].at: set the commit time of the new server's first change, RFC 3339 (e.g. 2026-12-06T10:00:00Z)", i)
		}
	}
	if err := c.DecoderConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	for i, t := range c.Tables {
		if t.Match == "" {
			add("tables[%d].match: set the Debezium source table, e.g. public.articles (or * for any)", i)
		}
		if t.Text != "" && !strings.Contains(t.Text, "{{") {
			add("tables[%d].text: the template names no column; write e.g. \"# {{title}}\\n\\n{{body}}\"", i)
		}
		for _, name := range slices.Sorted(maps.Keys(t.Fields)) {
			switch {
			case !fieldName.MatchString(name):
				add("tables[%d].fields.%s: a field name is letters, digits and _ starting with a letter (it is a metadata key filters name)", i, name)
			case slices.Contains(t.Metadata, name):
				add("tables[%d].fields.%s: the name is also in tables[%d].metadata, and both would write the same metadata key; rename the field", i, name, i)
			case strings.Contains(t.Fields[name], "\n"):
				add("tables[%d].fields.%s: a field template is one line; write e.g. \"{{category}}\"", i, name)
			}
		}
	}
	if c.IndexPoll < 0 {
		add("index_poll: %s must be a positive duration such as 2s (0 means the default, 2s)", c.IndexPoll)
	}
	if !IndexName.MatchString(c.Index) {
		add("index: %q must be lower-case letters, digits and _ starting with a letter (at most 41 characters)", c.Index)
	}
	errs = append(errs, c.validateIndexType()...)
	if c.Postgres.URL == "" {
		add("postgres.url: set the Postgres URL of the index, e.g. postgres://postgres@127.0.0.1:5432/ragsync")
	}
	if c.Postgres.Schema == "" || !IndexName.MatchString(c.Postgres.Schema) {
		add("postgres.schema: %q must be a lower-case identifier such as ragsync", c.Postgres.Schema)
	}
	if err := c.ChunkerConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.EmbedderConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Reuse.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.Purge.Options(); err != nil {
		errs = append(errs, err)
	}
	if c.FrontDoor.Enabled {
		if err := c.FrontDoorConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Freshness.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateMonitor(); err != nil {
		errs = append(errs, err)
	}
	if c.Pipeline.Workers < 0 {
		add("pipeline.workers: must be >= 0 (0 means the default: 4, or 32 with provider openai)")
	}
	if c.Pipeline.StallLogInterval < 0 {
		add("pipeline.stall_log_interval: must be >= 0 (0 means the default, 30s)")
	}
	if err := c.PipelineConfig(nil, nil).Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		add("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	return errors.Join(errs...)
}

func (c Config) ChunkerConfig() chunker.Config {
	return chunker.Config{
		Strategy:     c.Chunker.Strategy,
		TargetTokens: c.Chunker.TargetTokens,
		MinTokens:    c.Chunker.MinTokens,
		MaxTokens:    c.Chunker.MaxTokens,

		RefineTargetTokens: c.Chunker.RefineTargetTokens,
	}.WithDefaults()
}

func (c Config) EmbedderConfig() embedder.Config {
	e := c.Embedder
	if e.Budget.RedisURL == "" {
		// The Redis the deployment already runs holds the provider
		// budget too, so replicas share their key's limits unasked.
		e.Budget.RedisURL = c.FrontDoor.RedisURL
	}
	if e.Provider == embedder.ProviderHashing {
		e.Model = "" // the offline embedder has one model; warnings() says so
	}
	return e.WithDefaults()
}

func (c Config) FrontDoorConfig() fallback.Config {
	f := c.FrontDoor.Config
	if f.Index == "" {
		f.Index = c.Index
	}
	return f.WithDefaults()
}

func (c Config) DecoderConfig() cdc.DecoderConfig {
	var d cdc.DecoderConfig
	for _, t := range c.Tables {
		d.Tables = append(d.Tables, cdc.TableConfig{Match: t.Match, ID: t.ID})
	}
	for _, m := range c.Source.Moves {
		d.Moves = append(d.Moves, cdc.SourceMove{Source: m.Source, At: m.At})
	}
	return d
}

func (c Config) PipelineTables() []pipeline.TableConfig {
	var ts []pipeline.TableConfig
	for _, t := range c.Tables {
		ts = append(ts, pipeline.TableConfig{Match: t.Match, Text: t.Text, Metadata: t.Metadata, Fields: t.Fields, Tenant: t.Tenant, ID: t.ID})
	}
	return ts
}

// ReuseConfig is near-duplicate vector reuse and the repayment of its debt
// (pipeline.ReuseConfig, pipeline.DebtConfig). The distance a reused
// vector may be predicted to have is monitor.cosine_bound: reuse has no
// bound of its own. Enabled and MinSimilarity are pointers because their
// zero values mean something: absent is the default (on, floor 0.90),
// `enabled: false` or `min_similarity: 0` turn reuse off.
type ReuseConfig struct {
	Enabled       *bool    `yaml:"enabled"`
	MinSimilarity *float64 `yaml:"min_similarity"`
	// Method is "edit" (default) or "shingle".
	Method string `yaml:"method"`
	// NewWords is "embed" (default) or "repay_first".
	NewWords string `yaml:"new_words"`
	// RepayWindow bounds how long a chunk stands on a reused vector;
	// 0 means 5m.
	RepayWindow time.Duration `yaml:"repay_window"`
	// RepayMaxTokensPerHour caps the background repayment; 0 means
	// 2,000,000.
	RepayMaxTokensPerHour int `yaml:"repay_max_tokens_per_hour"`
}

// pipeline returns the pipeline's reuse settings: the bound is the
// monitor's, and pred (nil: a fresh one) is shared with the repayment.
func (r ReuseConfig) Pipeline(mon monitor.Config, pred *pipeline.Predictor) pipeline.ReuseConfig {
	out := pipeline.ReuseConfig{Method: r.Method, NewWords: r.NewWords, Bound: mon.WithDefaults().CosineBound, Predictor: pred}
	if r.Enabled != nil && !*r.Enabled {
		out.Disabled = true
	}
	if r.MinSimilarity != nil {
		if *r.MinSimilarity == 0 {
			out.Disabled = true
		} else {
			out.MinSimilarity = *r.MinSimilarity
		}
	}
	return out
}

// debt returns the repayment's settings.
func (r ReuseConfig) Debt(pred *pipeline.Predictor) pipeline.DebtConfig {
	return pipeline.DebtConfig{Window: r.RepayWindow, MaxTokensPerHour: r.RepayMaxTokensPerHour, Predictor: pred}
}

// validate checks the reuse settings, naming the YAML fields.
func (r ReuseConfig) Validate() error {
	errs := []error{r.Debt(nil).Validate()}
	if p := r.Pipeline(monitor.Config{}, nil); !p.Disabled {
		errs = append(errs, p.Validate())
	}
	return errors.Join(errs...)
}

// PurgeConfig is the retention of soft-deleted documents and unused cached
// embeddings (sink.PurgeOptions), for `ragsync purge` and serve's periodic
// purge.
type PurgeConfig struct {
	// Interval between serve's purges; 0 means 1h.
	Interval time.Duration `yaml:"interval"`
	// DocumentRetention keeps soft-deleted documents; 0 means 720h.
	DocumentRetention time.Duration `yaml:"document_retention"`
	// CacheRetention keeps unused cache entries; 0 means 2160h.
	CacheRetention time.Duration `yaml:"cache_retention"`
}

// Options returns the sink's purge options, checked.
func (p PurgeConfig) Options() (sink.PurgeOptions, error) {
	var errs []error
	if p.Interval < 0 {
		errs = append(errs, errors.New("purge.interval: must be >= 0 (0 means 1h)"))
	}
	if p.DocumentRetention < 0 {
		errs = append(errs, errors.New("purge.document_retention: must be >= 0 (0 means 720h)"))
	}
	if p.CacheRetention < 0 {
		errs = append(errs, errors.New("purge.cache_retention: must be >= 0 (0 means 2160h)"))
	}
	return sink.PurgeOptions{DocumentRetention: p.DocumentRetention, CacheRetention: p.CacheRetention}, errors.Join(errs...)
}
