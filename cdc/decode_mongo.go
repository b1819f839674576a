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
// JSON string (or, from newer converters, already as an object). It also
// returns the document's _id as sent (see plainDoc).
func mongoDoc(v any) (map[string]any, any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil, nil
	case string:
		parsed, err := parseJSON([]byte(v))
		if err != nil {
			return nil, nil, fmt.Errorf("extended JSON: %w", err)
		}
		m, ok := parsed.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("extended JSON: want an object, got %s", describe(parsed))
		}
		doc, id := plainDoc(m)
		return doc, id, nil
	case map[string]any:
		doc, id := plainDoc(v)
		return doc, id, nil
	}
	return nil, nil, fmt.Errorf("want an object or a JSON string, got %s", describe(v))
}

// mongoKeyValue decodes the value of a MongoDB message key's "id" field: the
// document's _id rendered as extended JSON inside a string
// ({"id":"{\"$oid\": \"596e…\"}"}, {"id":"1004"} for a numeric _id,
// {"id":"\"1004\""} for a string one). A string that is not JSON is a plain
// string _id. It returns the plain value and the _id as sent.
func mongoKeyValue(v any) (plain, raw any) {
	s, ok := v.(string)
	if !ok {
		return plainExt(deepCopy(v, 0), 0), v
	}
	parsed, err := parseJSON([]byte(s))
	if err != nil {
		return s, s
	}
	return plainExt(deepCopy(parsed, 0), 0), parsed
}

// plainDoc applies plainExt to each field of a document but never to the
// document itself: a document {"$oid": …} stays a document, it is not
// collapsed into a string. It returns the _id as it was before (a copy):
// plainExt turns an ObjectId into its hex string and the document key must
// still tell the two apart.
func plainDoc(doc map[string]any) (map[string]any, any) {
	id := deepCopy(doc["_id"], 0)
	for k, v := range doc {
		doc[k] = plainExt(v, 1)
	}
	return doc, id
}

// deepCopy copies a decoded JSON value, down to maxDepth.
func deepCopy(v any, depth int) any {
	if depth > maxDepth {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e, depth+1)
		}
		return m
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = deepCopy(e, depth+1)
		}
		return a
	}
	return v
}
