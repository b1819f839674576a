package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"

	"github.com/ragsync/ragsync/cdc"
)

// Config says how to reach a Confluent-compatible schema registry
// (Confluent Schema Registry, Apicurio's compatibility API, Redpanda's,
// Karapace). Its settings live under source.kafka.registry.
type Config struct {
	// URL is the registry's base URL, http:// or https://. Required.
	URL string
	// Username and Password authenticate with HTTP basic auth (Confluent
	// Cloud's API key and secret). Defaults to none. Exclusive with
	// BearerToken.
	Username, Password string
	// BearerToken is sent as "Authorization: Bearer <token>". Defaults to
	// none. Exclusive with Username and Password.
	BearerToken string
	// CAFile is a PEM file of the certificate authorities that sign the
	// registry's certificate. Defaults to the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key for
	// mutual TLS; set both or neither. Defaults to none.
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any server certificate. For tests only:
	// it lets anyone on the path pose as the registry. Defaults to false.
	InsecureSkipVerify bool
	// Timeout bounds each request to the registry. Defaults to 10s.
	Timeout time.Duration
}

// defaultTimeout is Config.Timeout's default: long enough for a registry
// under load, short enough that an outage is seen and retried quickly.
const defaultTimeout = 10 * time.Second

// maxCached bounds the compiled schemas kept. Ids never change their
// schema, so entries never go stale; the bound only keeps a topic that
// registers a schema per record from growing the cache without limit.
const maxCached = 10_000

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("source.kafka.registry.url: required, set it to the registry's base URL (https://host:8081)"))
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("source.kafka.registry.url: %q is not an http:// or https:// URL, set it to the registry's base URL (https://host:8081)", c.URL))
	}
	if c.BearerToken != "" && (c.Username != "" || c.Password != "") {
		errs = append(errs, errors.New("source.kafka.registry.bearer_token: set either it or username and password, not both"))
	}
	if c.Password != "" && c.Username == "" {
		errs = append(errs, errors.New("source.kafka.registry.username: required with password, set it to the registry's user or API key"))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("source.kafka.registry.cert_file, key_file: set both (a client certificate and its key) or neither"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("source.kafka.registry.timeout: %s is negative, set it to a duration such as 10s", c.Timeout))
	}
	return errors.Join(errs...)
}

// tlsConfig builds the client's TLS settings, or nil for the defaults.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" && !c.InsecureSkipVerify {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // documented as test-only
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("source.kafka.registry.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("source.kafka.registry.ca_file: %s holds no PEM certificate, set it to the CA that signs the registry's certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("source.kafka.registry.cert_file, key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Registry decodes records framed by a schema registry's converters. It
// fetches each schema id once, compiles it, and keeps it: ids are
// immutable. It is safe for concurrent use; a burst of records with a new
// id makes one request.
type Registry struct {
	cl  *sr.Client
	url string

	mu     sync.RWMutex
	cache  map[int]*entry
	flight singleflight.Group
}

var _ cdc.SchemaDecoder = (*Registry)(nil)

// entry is one schema id, fetched and compiled.
type entry struct {
	desc     Schema
	f        format
	err      error               // the compile error: the schema itself is unusable
	subjects []sr.SubjectVersion // nil when the registry could not say
}

// Schema describes a registered schema.
type Schema struct {
	ID int
	// Type is AVRO, PROTOBUF or JSON.
	Type string
	// Subject and Version are where the schema is registered (the first
	// by name when it is registered under several), or "" and 0 when the
	// registry could not say.
	Subject string
	Version int
	// Text is the schema as registered.
	Text string
}

// New returns a Registry for cfg. It makes no request: the registry may be
// down at start-up, and records wait for it.
func New(cfg Config) (*Registry, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URL),
		sr.HTTPClient(&http.Client{Timeout: cfg.Timeout, Transport: tr}),
		sr.UserAgent("ragsync"),
	}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	if cfg.BearerToken != "" {
		opts = append(opts, sr.BearerToken(cfg.BearerToken))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("source.kafka.registry: %w", err)
	}
	return &Registry{cl: cl, url: cfg.URL, cache: map[int]*entry{}}, nil
}

// DecodeFramed implements cdc.SchemaDecoder: it decodes b, a key or value
// in the registry's wire format, with the schema its id names. Confluent's
// converters and Apicurio's in its Confluent-compatible mode
// (apicurio.registry.as-confluent=true) write the same four-byte id, so
// both read alike. Errors that errors.Is cdc.ErrRegistryUnavailable are
// transient; every other error is permanent and names the schema id and
// subject.
func (r *Registry) DecodeFramed(ctx context.Context, topic string, isKey bool, b []byte) (any, map[string]any, error) {
	id, body, err := header(b)
	if err != nil {
		return nil, nil, err
	}
	e, err := r.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if e.err != nil {
		return nil, nil, fmt.Errorf("schema id %d (subject %s): %w", id, e.subject(topic, isKey), e.err)
	}
	payload, connect, err := e.f.decode(body)
	if err != nil {
		return nil, nil, fmt.Errorf("decode with schema id %d (subject %s): %w", id, e.subject(topic, isKey), err)
	}
	return payload, connect, nil
}

// Describe returns the schema registered under id, for ragsync inspect.
// Its errors are classified as DecodeFramed's.
func (r *Registry) Describe(ctx context.Context, id int) (Schema, error) {
	e, err := r.lookup(ctx, id)
	if err != nil {
		return Schema{}, err
	}
	return e.desc, nil
}

// lookup returns id's entry from the cache, or fetches and compiles it,
// once for all the callers that ask at the same time. Transient failures
// are not cached: the next record asks again.
func (r *Registry) lookup(ctx context.Context, id int) (*entry, error) {
	r.mu.RLock()
	e := r.cache[id]
	r.mu.RUnlock()
	if e != nil {
		return e, nil
	}
	v, err, _ := r.flight.Do(strconv.Itoa(id), func() (any, error) {
		r.mu.RLock()
		e := r.cache[id]
		r.mu.RUnlock()
		if e != nil {
			return e, nil
		}
		e, err := r.fetch(ctx, id)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		if len(r.cache) >= maxCached {
			for k := range r.cache { // evict one arbitrary entry
				delete(r.cache, k)
				break
			}
		}
		r.cache[id] = e
		r.mu.Unlock()
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*entry), nil
}

// fetch reads schema id, its references and its subjects, and compiles it.
func (r *Registry) fetch(ctx context.Context, id int) (*entry, error) {
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, r.classify(err, id, "")
	}
	e := &entry{desc: Schema{ID: id, Type: s.Type.String(), Text: s.Schema}}
	// The subject only names the schema in errors and in inspect, so a
	// failure here is not worth a record's delay.
	if svs, err := r.cl.SchemaVersionsByID(ctx, id); err == nil && len(svs) > 0 {
		slices.SortFunc(svs, func(a, b sr.SubjectVersion) int {
			if a.Subject != b.Subject {
				if a.Subject < b.Subject {
					return -1
				}
				return 1
			}
			return a.Version - b.Version
		})
		e.subjects = svs
		e.desc.Subject, e.desc.Version = svs[0].Subject, svs[0].Version
	}
	refs := map[string]string{}
	if err := r.references(ctx, id, s.References, refs, 0); err != nil {
		return nil, err
	}
	e.f, e.err = compile(s.Type, s.Schema, refs)
	return e, nil
}

// maxRefDepth bounds chains of references (a schema that imports one that
// imports another…), which a registry does not forbid from looping.
const maxRefDepth = 32

// references resolves refs (and theirs) through the registry by subject
// and version into refs, name → schema text.
func (r *Registry) references(ctx context.Context, id int, refs []sr.SchemaReference, out map[string]string, depth int) error {
	for _, ref := range refs {
		if _, ok := out[ref.Name]; ok {
			continue
		}
		if depth >= maxRefDepth {
			return fmt.Errorf("schema id %d: references nested deeper than %d (a cycle through %s?)", id, maxRefDepth, ref.Subject)
		}
		ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return r.classify(err, id, fmt.Sprintf("reference %q (subject %s version %d)", ref.Name, ref.Subject, ref.Version))
		}
		out[ref.Name] = ss.Schema.Schema
		if err := r.references(ctx, id, ss.References, out, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// classify turns a client error into a transient one (wrapping
// cdc.ErrRegistryUnavailable) or a permanent one naming the id. what,
// when set, names the reference that failed.
func (r *Registry) classify(err error, id int, what string) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		// The network, a timeout, or an answer that is not the registry's.
		return fmt.Errorf("%w: fetch schema id %d from %s: %w", cdc.ErrRegistryUnavailable, id, r.url, err)
	}
	switch {
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		// Not the record's fault: every record would fail alike, so the
		// source stalls, visibly, until the credentials are fixed.
		return fmt.Errorf("%w: the registry at %s refused ragsync's credentials (HTTP %d: %s): check source.kafka.registry.username, password or bearer_token",
			cdc.ErrRegistryUnavailable, r.url, re.StatusCode, re.Message)
	case re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500:
		return fmt.Errorf("%w: fetch schema id %d from %s: HTTP %d: %s", cdc.ErrRegistryUnavailable, id, r.url, re.StatusCode, re.Message)
	case what != "":
		return fmt.Errorf("schema id %d: %s: HTTP %d: %s", id, what, re.StatusCode, re.Message)
	case re.ErrorCode == sr.ErrSchemaNotFound.Code:
		return fmt.Errorf("schema id %d is not in the registry at %s (was the topic written against another registry?)", id, r.url)
	case re.StatusCode == http.StatusNotFound:
		// Not the registry's "schema not found" but a path nothing serves:
		// a URL with a wrong base path would otherwise dead-letter every
		// record of every topic.
		return fmt.Errorf("%w: %s does not serve the registry's API (GET schema id %d: HTTP 404: %s): check source.kafka.registry.url",
			cdc.ErrRegistryUnavailable, r.url, id, re.Message)
	}
	return fmt.Errorf("fetch schema id %d from %s: HTTP %d: %s", id, r.url, re.StatusCode, re.Message)
}

// subject names the schema's subject in errors: the one the default
// TopicNameStrategy gives (topic-key or topic-value) when the schema is
// registered there, else the first, else "subject unknown".
func (e *entry) subject(topic string, isKey bool) string {
	if len(e.subjects) == 0 {
		return "unknown"
	}
	want := topic + "-value"
	if isKey {
		want = topic + "-key"
	}
	for _, sv := range e.subjects {
		if sv.Subject == want {
			return fmt.Sprintf("%s version %d", sv.Subject, sv.Version)
		}
	}
	return fmt.Sprintf("%s version %d", e.subjects[0].Subject, e.subjects[0].Version)
}

// compile builds the format of one schema from its text and its resolved
// references (name → text).
func compile(typ sr.SchemaType, text string, refs map[string]string) (format, error) {
	switch typ {
	case sr.TypeAvro:
		return compileAvro(text, refs)
	case sr.TypeProtobuf:
		return compileProtobuf(text, refs)
	case sr.TypeJSON:
		return compileJSONSchema(text, refs)
	}
	return nil, fmt.Errorf("schema type %s is not supported", typ)
}
