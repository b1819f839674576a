package fallback

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Field names of request and reply entries (see PROTOCOL.md).
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
}

// Result is one reply.
type Result struct {
	ID     string
	Status Status
	Hits   []Hit
	// Reason says why a reply is degraded or an error; empty for ok.
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
	Deadline    time.Time
	TraceParent string
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

// parseRequest validates a request entry. It returns the request with ID and
// ReplyTo filled even when validation fails, so the caller can still answer.
func parseRequest(entryID string, values map[string]any, cfg Config, now time.Time) (request, error) {
	r := request{
		EntryID:     entryID,
		ID:          fieldString(values, fieldID),
		ReplyTo:     fieldString(values, fieldReplyTo),
		Tenant:      fieldString(values, fieldTenant),
		TraceParent: fieldString(values, fieldTraceParent),
	}
	if r.ID == "" {
		// Answer anyway, keyed by the entry id, so the sender learns why.
		r.ID = entryID
		return r, &InvalidRequestError{Field: fieldID, Reason: "missing; send a unique id (a UUID) per request"}
	}
	if len(r.ID) > 128 {
		return r, &InvalidRequestError{Field: fieldID, Reason: "longer than 128 bytes"}
	}
	if r.ReplyTo == "" {
		return r, &InvalidRequestError{Field: fieldReplyTo, Reason: "missing; name the stream to reply on"}
	}
	raw := fieldString(values, fieldQuery)
	if len(raw) > cfg.MaxQueryBytes {
		return r, &InvalidRequestError{Field: fieldQuery, Reason: fmt.Sprintf("%d bytes is over the limit of %d", len(raw), cfg.MaxQueryBytes)}
	}
	if !utf8.ValidString(raw) {
		return r, &InvalidRequestError{Field: fieldQuery, Reason: "not valid UTF-8"}
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
	if fs := fieldString(values, fieldFilter); fs != "" {
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
	return r, nil
}

func (r *request) parseFilter(fs string, allowed []string) error {
	var f map[string]any
	if err := json.Unmarshal([]byte(fs), &f); err != nil {
		return &InvalidRequestError{Field: fieldFilter, Reason: "not a JSON object: " + err.Error()}
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
			if key == FilterDocID {
				r.DocID = s
			} else {
				r.Table = s
			}
		default:
			if r.Filter == nil {
				r.Filter = map[string]any{}
			}
			r.Filter[key] = v
		}
	}
	if len(f) > 0 {
		// encoding/json sorts map keys, so this is canonical for the cache key.
		b, _ := json.Marshal(f)
		r.FilterJSON = string(b)
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

func (r reply) fields(id string) []any {
	res := r.Results
	if res == nil {
		res = emptyResults
	}
	f := []any{fieldID, id, fieldStatus, string(r.Status), fieldResults, string(res), fieldCached, strconv.FormatBool(r.Cached), fieldSource, r.Source}
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
	case StatusOK, StatusDegraded, StatusError:
	default:
		return res, fmt.Errorf("decode reply %s: unknown status %q", res.ID, res.Status)
	}
	return res, nil
}

func encodeHits(hits []sinkHit, docID string) []byte {
	out := make([]Hit, 0, len(hits))
	for _, h := range hits {
		if docID != "" && h.DocID != docID {
			continue
		}
		out = append(out, Hit{DocID: h.DocID, Table: h.Table, Key: h.Key, Position: h.Position, Text: h.Text, Score: h.Score, Metadata: h.Metadata})
	}
	b, err := json.Marshal(out)
	if err != nil {
		// Metadata came from JSONB, so it always marshals; keep the reply valid anyway.
		return emptyResults
	}
	return b
}
