package fallback

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/ragsync/ragsync/cdc"
)

// Field names of request and reply entries (see docs/frontdoor.md).
const (
	fieldID          = "id"
	fieldQuery       = "query"
	fieldK           = "k"
	fieldFilter      = "filter"
	fieldTenant      = "tenant"
	fieldReplyTo     = "reply_to"
	fieldDeadline    = "deadline_ms"
	fieldTraceParent = "traceparent"
	fieldStatus      = "status"
	fieldResults     = "results"
	fieldReason      = "reason"
	fieldCached      = "cached"
	fieldSource      = "source"
	fieldEntry       = "entry" // reply: the request's entry id, so a client can tell its reply from one to a reused id
	fieldAfter       = "after"
	fieldAfterWait   = "after_timeout_ms"
)

// Filter keys the front door interprets itself.
const (
	// FilterDocID restricts results to one document id; it is checked
	// against the document Bloom filter first.
	FilterDocID = "doc_id"
	// FilterTable restricts results to one source table ("schema.table").
	FilterTable = "table"
)

// Status is a reply's status field.
type Status string

// Reply statuses.
const (
	StatusOK       Status = "ok"
	StatusDegraded Status = "degraded"
	StatusError    Status = "error"
	// StatusNotYet answers a request with after when the index's
	// watermark did not pass it in time: no hits, and a reason saying
	// where the watermark is. Asking again later may succeed.
	StatusNotYet Status = "not_yet"
)

// Source says where a reply's results came from (the reply's source field).
const (
	SourceCache    = "cache"    // fresh result cache (cached=true)
	SourceSearch   = "search"   // embedding + pgvector, computed for this request
	SourceShared   = "shared"   // computed by a concurrent identical request
	SourceBloom    = "bloom"    // unknown tenant or document: empty without a search
	SourceStale    = "stale"    // last good answer, kept past its freshness (degraded)
	SourceFullText = "fulltext" // Postgres full-text search over chunk text (degraded)
	SourceNone     = "none"     // status error
)

// Query is one retrieval request as Client.Search sends it.
type Query struct {
	// Text is the query text. Required.
	Text string
	// K is the number of results wanted, 1 ≤ K ≤ the server's max_k.
	K int
	// Tenant restricts results to one tenant; empty means any.
	Tenant string
	// Filter keys must be in the server's allowed_filters.
	Filter map[string]any
	// Deadline, if set, is sent as deadline_ms; a request still queued past
	// it is answered with status error. Defaults to the context's deadline.
	Deadline time.Time
	// TraceParent is a W3C traceparent passed through for tracing.
	TraceParent string
	// After, if set, asks for an answer only once the index holds every
	// change at or before it: a source position or an RFC 3339 time, as
	// cdc.ParseAfter reads them. Without it in time the reply has status
	// not_yet.
	After string
	// AfterTimeout is how long the front door may wait for the watermark
	// to pass After, sent as after_timeout_ms; the server caps it at its
	// max_after_wait and at the deadline. 0 leaves it to the server
	// (DefaultAfterWait); negative asks for no wait at all.
	AfterTimeout time.Duration
}

// Hit is one result on the wire.
type Hit struct {
	DocID    string         `json:"doc_id"`
	Table    string         `json:"table"`
	Key      string         `json:"key"`
	Position int            `json:"position"`
	Text     string         `json:"text"`
	Score    float64        `json:"score"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// Provenance is where the chunk came from. A reply cached by a
	// release before provenance carries none: every value unknown.
	Provenance Provenance `json:"provenance"`
}

// Provenance is where a hit's chunk came from: the index's model and
// dimensions, the model version the provider reported for its vector, the
// chunker settings that cut it, and the change that wrote it (its source,
// position in the source, commit time and trace id). An empty string or a
// zero value is unknown, written as JSON null: the chunk was written
// before ragsync recorded provenance, which cannot be proven afterwards.
type Provenance struct {
	Model          string    `json:"model"`
	ModelVersion   string    `json:"model_version"`
	Dimensions     int       `json:"dimensions"`
	Chunker        string    `json:"chunker"`
	Source         string    `json:"source"`
	SourcePosition string    `json:"source_position"`
	CommittedAt    time.Time `json:"committed_at"`
	TraceID        string    `json:"trace_id"`
}

// provenanceJSON is Provenance as written: nil (null) for unknown.
type provenanceJSON struct {
	Model          *string    `json:"model"`
	ModelVersion   *string    `json:"model_version"`
	Dimensions     *int       `json:"dimensions"`
	Chunker        *string    `json:"chunker"`
	Source         *string    `json:"source"`
	SourcePosition *string    `json:"source_position"`
	CommittedAt    *time.Time `json:"committed_at"`
	TraceID        *string    `json:"trace_id"`
}

// MarshalJSON writes every field, unknown ones as null, so a reader can
// tell "unknown" from a value (decoding null leaves the zero value).
func (p Provenance) MarshalJSON() ([]byte, error) {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	j := provenanceJSON{Model: str(p.Model), ModelVersion: str(p.ModelVersion), Chunker: str(p.Chunker),
		Source: str(p.Source), SourcePosition: str(p.SourcePosition), TraceID: str(p.TraceID)}
	if p.Dimensions != 0 {
		j.Dimensions = &p.Dimensions
	}
	if !p.CommittedAt.IsZero() {
		t := p.CommittedAt.UTC()
		j.CommittedAt = &t
	}
	return json.Marshal(j)
}

// Result is one reply.
type Result struct {
	ID     string
	Status Status
	Hits   []Hit
	// Reason says why a reply is degraded, an error or not_yet; empty for ok.
	Reason string
	// Cached is true when the answer was not computed for this request
	// (cache hit, or shared with a concurrent identical request).
	Cached bool
	// Source is where the results came from: cache, search, shared, bloom,
	// stale, fulltext or none.
	Source string
}

// request is a validated request entry.
type request struct {
	EntryID     string // stream entry id
	ID          string
	Query       string // normalised
	K           int
	Tenant      string
	Filter      map[string]any // metadata filter, without doc_id and table
	DocID       string
	Table       string
	FilterJSON  string // canonical JSON of the full filter, "" if none
	ReplyTo     string
	OrigEntry   string // entry id the request first had, for a dead letter
	Deadline    time.Time
	TraceParent string
	// After is the parsed after field, nil without one; AfterWait is how
	// long the request asks to wait for it.
	After     *cdc.After
	AfterWait time.Duration
}

// normalizeQuery makes equivalent query texts share a cache key: Unicode NFC,
// whitespace runs folded to one space, trimmed. Case is kept because
// embedding models are case-sensitive.
func normalizeQuery(s string) string {
	return strings.Join(strings.Fields(norm.NFC.String(s)), " ")
}

func fieldString(values map[string]any, name string) string {
	switch v := values[name].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// maxReplyToBytes bounds reply_to past the reply namespace.
const maxReplyToBytes = 256

// entryBytes is the size of a request entry as sent: field names and values.
func entryBytes(values map[string]any) int {
	n := 0
	for k, v := range values {
		n += len(k)
		switch v := v.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += len(fieldString(values, k))
		}
	}
	return n
}

// checkText refuses what Postgres would refuse as data (invalid UTF-8 and
// NUL are SQLSTATE 22021 in text, 22P05 in jsonb): such input is the
// request's fault and must be answered as such, never reach the database and
// count against the circuit breaker.
func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return &InvalidRequestError{Field: field, Reason: "not valid UTF-8"}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return &InvalidRequestError{Field: field, Reason: "contains a NUL character"}
	}
	return nil
}

// parseRequest validates a request entry. It returns the request with ID and
// ReplyTo filled even when validation fails, so the caller can still answer;
// ReplyTo is empty when the entry names no usable reply stream (missing, or
// outside cfg.ReplyPrefix), and then nothing may be written for it.
func parseRequest(entryID string, values map[string]any, cfg Config, now time.Time) (request, error) {
	r := request{
		EntryID: entryID,
		ID:      fieldString(values, fieldID),
		ReplyTo: fieldString(values, fieldReplyTo),
	}
	if r.ReplyTo == "" {
		return r, &InvalidRequestError{Field: fieldReplyTo, Reason: "missing; name the stream to reply on"}
	}
	if !strings.HasPrefix(r.ReplyTo, cfg.ReplyPrefix) || len(r.ReplyTo) == len(cfg.ReplyPrefix) ||
		len(r.ReplyTo) > len(cfg.ReplyPrefix)+maxReplyToBytes {
		// Refused without a reply: writing to a key outside the reply
		// namespace is exactly what must not happen.
		r.ReplyTo = ""
		return r, &InvalidRequestError{Field: fieldReplyTo, Reason: fmt.Sprintf("must be a key under %q of at most %d more bytes", cfg.ReplyPrefix, maxReplyToBytes)}
	}
	if r.ID == "" {
		// Answer anyway, keyed by the entry id, so the sender learns why.
		r.ID = entryID
		return r, &InvalidRequestError{Field: fieldID, Reason: "missing; send a unique id (a UUID) per request"}
	}
	if len(r.ID) > 128 {
		r.ID = entryID
		return r, &InvalidRequestError{Field: fieldID, Reason: "longer than 128 bytes"}
	}
	if n := entryBytes(values); n > cfg.MaxRequestBytes {
		return r, &InvalidRequestError{Field: "request", Reason: fmt.Sprintf("%d bytes is over the limit of %d (max_request_bytes)", n, cfg.MaxRequestBytes)}
	}
	r.Tenant = fieldString(values, fieldTenant)
	r.TraceParent = fieldString(values, fieldTraceParent)
	// A replayed dead letter keeps its first entry id, so its reply names
	// the entry the client's XADD returned.
	r.OrigEntry = fieldString(values, fieldDLQEntry)
	raw := fieldString(values, fieldQuery)
	if len(raw) > cfg.MaxQueryBytes {
		return r, &InvalidRequestError{Field: fieldQuery, Reason: fmt.Sprintf("%d bytes is over the limit of %d", len(raw), cfg.MaxQueryBytes)}
	}
	if err := checkText(fieldQuery, raw); err != nil {
		return r, err
	}
	r.Query = normalizeQuery(raw)
	if r.Query == "" {
		return r, &InvalidRequestError{Field: fieldQuery, Reason: "empty"}
	}
	ks := fieldString(values, fieldK)
	k, err := strconv.Atoi(ks)
	if err != nil {
		return r, &InvalidRequestError{Field: fieldK, Reason: fmt.Sprintf("%q is not an integer", ks)}
	}
	if k < 1 || k > cfg.MaxK {
		return r, &InvalidRequestError{Field: fieldK, Reason: fmt.Sprintf("%d is outside 1..%d", k, cfg.MaxK)}
	}
	r.K = k
	if len(r.Tenant) > 256 {
		return r, &InvalidRequestError{Field: fieldTenant, Reason: "longer than 256 bytes"}
	}
	if err := checkText(fieldTenant, r.Tenant); err != nil {
		return r, err
	}
	if fs := fieldString(values, fieldFilter); fs != "" {
		if len(fs) > cfg.MaxFilterBytes {
			return r, &InvalidRequestError{Field: fieldFilter, Reason: fmt.Sprintf("%d bytes is over the limit of %d (max_filter_bytes)", len(fs), cfg.MaxFilterBytes)}
		}
		if err := r.parseFilter(fs, cfg.AllowedFilters); err != nil {
			return r, err
		}
	}
	if ds := fieldString(values, fieldDeadline); ds != "" {
		ms, err := strconv.ParseInt(ds, 10, 64)
		if err != nil || ms <= 0 {
			return r, &InvalidRequestError{Field: fieldDeadline, Reason: fmt.Sprintf("%q is not a Unix time in milliseconds", ds)}
		}
		r.Deadline = time.UnixMilli(ms)
		if !r.Deadline.After(now) {
			return r, &InvalidRequestError{Field: fieldDeadline, Reason: fmt.Sprintf("deadline passed %s ago", now.Sub(r.Deadline).Round(time.Millisecond))}
		}
	}
	if err := r.parseAfter(values); err != nil {
		return r, err
	}
	return r, nil
}

// parseAfter reads after and after_timeout_ms.
func (r *request) parseAfter(values map[string]any) error {
	as, ws := fieldString(values, fieldAfter), fieldString(values, fieldAfterWait)
	if as == "" {
		if ws != "" {
			return &InvalidRequestError{Field: fieldAfterWait, Reason: "given without after; send after too, or neither"}
		}
		return nil
	}
	a, err := cdc.ParseAfter(as)
	if err != nil {
		return &InvalidRequestError{Field: fieldAfter, Reason: strings.TrimPrefix(err.Error(), "after: ")}
	}
	r.After, r.AfterWait = &a, DefaultAfterWait
	if ws != "" {
		ms, err := strconv.ParseInt(ws, 10, 64)
		if err != nil || ms < 0 {
			return &InvalidRequestError{Field: fieldAfterWait, Reason: fmt.Sprintf("%q is not a number of milliseconds (0 or more)", ws)}
		}
		r.AfterWait = time.Duration(min(ms, int64(24*time.Hour/time.Millisecond))) * time.Millisecond
	}
	return nil
}

func (r *request) parseFilter(fs string, allowed []string) error {
	// UseNumber keeps numbers as their decimal text, from here through the
	// cache key to the jsonb parameter: as float64, 9007199254740993
	// matched 9007199254740992 and both shared a cache key.
	dec := json.NewDecoder(strings.NewReader(fs))
	dec.UseNumber()
	var f map[string]any
	if err := dec.Decode(&f); err != nil {
		return &InvalidRequestError{Field: fieldFilter, Reason: "not a JSON object: " + err.Error()}
	}
	if dec.More() {
		return &InvalidRequestError{Field: fieldFilter, Reason: "not a JSON object: data after the object"}
	}
	for key, v := range f {
		if !contains(allowed, key) {
			return &InvalidRequestError{Field: fieldFilter, Reason: fmt.Sprintf("key %q is not allowed (allowed: %s)", key, strings.Join(allowed, ", "))}
		}
		switch key {
		case FilterDocID, FilterTable:
			s, ok := v.(string)
			if !ok || s == "" {
				return &InvalidRequestError{Field: fieldFilter, Reason: fmt.Sprintf("%s must be a non-empty string", key)}
			}
			if err := checkText(fieldFilter+"."+key, s); err != nil {
				return err
			}
			if key == FilterDocID {
				r.DocID = s
			} else {
				r.Table = s
			}
		default:
			if err := checkJSONText(fieldFilter+"."+key, v); err != nil {
				return err
			}
			if r.Filter == nil {
				r.Filter = map[string]any{}
			}
			r.Filter[key] = v
		}
	}
	if len(f) > 0 {
		// encoding/json sorts map keys and writes a json.Number as its
		// text, so this is canonical for the cache key.
		b, _ := json.Marshal(f)
		r.FilterJSON = string(b)
	}
	return nil
}

// checkJSONText applies checkText to every string (and object key) in v.
func checkJSONText(field string, v any) error {
	switch v := v.(type) {
	case string:
		return checkText(field, v)
	case []any:
		for _, x := range v {
			if err := checkJSONText(field, x); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, x := range v {
			if err := checkText(field, k); err != nil {
				return err
			}
			if err := checkJSONText(field, x); err != nil {
				return err
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// reply is one reply entry before encoding.
type reply struct {
	Status  Status
	Results []byte // JSON array of Hit
	Reason  string
	Cached  bool
	Source  string
}

var emptyResults = []byte("[]")

// replyEntry is the request entry id a reply names: the one the client's
// XADD returned, also for a dead letter answered from the DLQ stream.
func (r request) replyEntry() string {
	if r.OrigEntry != "" {
		return r.OrigEntry
	}
	return r.EntryID
}

func (r reply) fields(id, entry string) []any {
	res := r.Results
	if res == nil {
		res = emptyResults
	}
	f := []any{fieldID, id, fieldEntry, entry, fieldStatus, string(r.Status), fieldResults, string(res), fieldCached, strconv.FormatBool(r.Cached), fieldSource, r.Source}
	if r.Reason != "" {
		f = append(f, fieldReason, r.Reason)
	}
	return f
}

// parseReply decodes a reply entry.
func parseReply(values map[string]any) (Result, error) {
	res := Result{
		ID:     fieldString(values, fieldID),
		Status: Status(fieldString(values, fieldStatus)),
		Reason: fieldString(values, fieldReason),
		Cached: fieldString(values, fieldCached) == "true",
		Source: fieldString(values, fieldSource),
	}
	if raw := fieldString(values, fieldResults); raw != "" {
		hits, err := decodeHits(raw)
		if err != nil {
			return res, fmt.Errorf("decode reply %s results: %w", res.ID, err)
		}
		res.Hits = hits
	}
	switch res.Status {
	case StatusOK, StatusDegraded, StatusError, StatusNotYet:
	default:
		return res, fmt.Errorf("decode reply %s: unknown status %q", res.ID, res.Status)
	}
	return res, nil
}

// encodeHits writes at most k hits (the sink already cut them; this holds
// the reply to k whatever the Searcher returns).
func encodeHits(hits []sinkHit, k int) []byte {
	out := make([]Hit, 0, min(len(hits), k))
	for _, h := range hits {
		if len(out) == k {
			break
		}
		out = append(out, Hit{DocID: h.DocID, Table: h.Table, Key: h.Key, Position: h.Position, Text: h.Text, Score: h.Score, Metadata: h.Metadata,
			Provenance: ProvenanceOf(h)})
	}
	b, err := json.Marshal(out)
	if err != nil {
		// Metadata came from JSONB, so it always marshals; keep the reply valid anyway.
		return emptyResults
	}
	return b
}
