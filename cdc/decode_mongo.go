package cdc

import (
	"encoding/json"
	"fmt"
	"time"
)

// MongoDB writes documents as extended JSON (relaxed or canonical, see the
// MongoDB "Extended JSON v2" spec), and Debezium's MongoDB connector ships
// them as JSON strings in "after", "before", "patch", "filter" and
// "updateDescription.updatedFields". plainExt rewrites the wrappers that
// have a plain JSON meaning; others ($binary, $timestamp, $regularExpression)
// stay as they are.
func plainExt(v any, depth int) any {
	if depth > maxDepth {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 1 {
			for k, inner := range v {
				if r, ok := plainWrapper(k, inner); ok {
					return r
				}
			}
		}
		for k, e := range v {
			v[k] = plainExt(e, depth+1)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = plainExt(e, depth+1)
		}
		return v
	}
	return v
}

func plainWrapper(k string, inner any) (any, bool) {
	switch k {
	case "$oid":
		s, ok := inner.(string)
		return s, ok
	case "$numberLong", "$numberInt", "$numberDouble", "$numberDecimal":
		switch n := inner.(type) {
		case json.Number:
			return n, true
		case string:
			if isJSONNumber(n) {
				return json.Number(n), true
			}
			return n, true // "Infinity", "NaN": no JSON number spells them
		}
	case "$date":
		return mongoDate(inner)
	}
	return nil, false
}

// mongoDate accepts the three $date spellings: canonical
// {"$numberLong":"ms"}, relaxed ISO-8601 string, and legacy bare ms.
func mongoDate(v any) (any, bool) {
	switch d := v.(type) {
	case map[string]any:
		if inner, ok := d["$numberLong"]; ok && len(d) == 1 {
			return mongoDate(inner)
		}
	case json.Number:
		ms, err := asInt(d)
		if err == nil {
			return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), true
		}
	case string:
		if t, err := time.Parse(time.RFC3339Nano, d); err == nil {
			return t.UTC().Format(time.RFC3339Nano), true
		}
		if ms, err := asInt(d); err == nil {
			return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), true
		}
	}
	return nil, false
}

func isJSONNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	return json.Valid([]byte(s))
}

// mongoDoc parses a document that MongoDB's connector sent as an extended
// JSON string (or, from newer converters, already as an object).
func mongoDoc(v any) (map[string]any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		parsed, err := parseJSON([]byte(v))
		if err != nil {
			return nil, fmt.Errorf("extended JSON: %w", err)
		}
		m, ok := parsed.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("extended JSON: want an object, got %s", describe(parsed))
		}
		return plainDoc(m), nil
	case map[string]any:
		return plainDoc(v), nil
	}
	return nil, fmt.Errorf("want an object or a JSON string, got %s", describe(v))
}

// mongoKeyValue decodes the value of a MongoDB message key's "id" field: the
// document's _id rendered as extended JSON inside a string
// ({"id":"{\"$oid\": \"596e…\"}"}, or {"id":"1004"} for a numeric _id).
// A string that is not JSON is a plain string _id.
func mongoKeyValue(v any) any {
	s, ok := v.(string)
	if !ok {
		return plainExt(v, 0)
	}
	parsed, err := parseJSON([]byte(s))
	if err != nil {
		return s
	}
	return plainExt(parsed, 0)
}

// plainDoc applies plainExt to each field of a document but never to the
// document itself: a document {"$oid": …} stays a document, it is not
// collapsed into a string.
func plainDoc(doc map[string]any) map[string]any {
	for k, v := range doc {
		doc[k] = plainExt(v, 1)
	}
	return doc
}
