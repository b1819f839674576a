package cdc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// keyEscaper makes a multi-column DocKey unambiguous: values are joined by
// "/", so "/" (and "%", the escape itself) inside a value is percent-escaped.
var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// documentKey finds the document's id: the configured id columns in the
// first row that has them all (after, before, MongoDB filter), else in the
// message key; with no columns configured, every field of the message key.
// ids are the MongoDB _id values of rows as sent (see event.ids).
func (d *Decoder) documentKey(ctx context.Context, topic, table string, mongo bool, rows []map[string]any, ids []any, key []byte) (string, map[string]any, error) {
	cols := d.idColumns(table)
	text := keyText
	if mongo {
		text = mongoKeyText
	}
	if len(cols) > 0 {
		for i, row := range rows {
			if vals, ok := pick(row, cols); ok {
				return joinKey(cols, vals, rawIDs(cols, vals, ids[i], mongo), text)
			}
		}
	}
	var kcols []string
	var kmap map[string]any
	var keyID any
	var err error
	if d.schemas != nil && IsFramed(key) {
		kcols, kmap, keyID, err = d.framedKey(ctx, topic, key, mongo)
	} else {
		kcols, kmap, keyID, err = parseKey(key, mongo)
	}
	if err != nil {
		return "", nil, err
	}
	if len(cols) > 0 {
		if mongo && len(cols) == 1 && cols[0] == "_id" && kmap["_id"] == nil && kmap["id"] != nil {
			// MongoDB keys name the document's _id "id".
			kmap = map[string]any{"_id": kmap["id"]}
		}
		if vals, ok := pick(kmap, cols); ok {
			return joinKey(cols, vals, rawIDs(cols, vals, keyID, mongo), text)
		}
		return "", nil, decodeErr(reasonNoKey, "columns %s not in after, before or the message key", strings.Join(cols, ", "))
	}
	if vals, ok := pick(kmap, kcols); ok && len(kcols) > 0 {
		if mongo && len(kcols) == 1 && kcols[0] == "id" {
			return joinKey(kcols, vals, []any{keyID}, text)
		}
		return joinKey(kcols, vals, vals, text)
	}
	return "", nil, &DecodeError{Reason: reasonNoKey}
}

// rawIDs returns the values to render for vals: the _id as sent where one
// of cols is a MongoDB _id, the value itself elsewhere.
func rawIDs(cols []string, vals []any, id any, mongo bool) []any {
	if !mongo || id == nil {
		return vals
	}
	out := slices.Clone(vals)
	for i, c := range cols {
		if c == "_id" || (c == "id" && len(cols) == 1) {
			out[i] = id
		}
	}
	return out
}

// pick returns row's values of cols, or false if one is absent or null, or
// the only one is the empty string (an empty DocKey means "no document").
func pick(row map[string]any, cols []string) ([]any, bool) {
	if row == nil {
		return nil, false
	}
	vals := make([]any, len(cols))
	for i, c := range cols {
		v := row[c]
		if v == nil {
			return nil, false
		}
		vals[i] = v
	}
	if s, ok := vals[0].(string); ok && len(vals) == 1 && s == "" {
		return nil, false
	}
	return vals, true
}

// joinKey renders the key: text(raws[i]) for each column, joined by "/"
// with "/" and "%" escaped inside values when there are several.
func joinKey(cols []string, vals, raws []any, text func(any) string) (string, map[string]any, error) {
	key := make(map[string]any, len(cols))
	parts := make([]string, len(vals))
	for i, v := range vals {
		key[cols[i]] = v
		parts[i] = text(raws[i])
	}
	if len(parts) == 1 {
		return parts[0], key, nil
	}
	for i, p := range parts {
		parts[i] = keyEscaper.Replace(p)
	}
	return strings.Join(parts, "/"), key, nil
}

// keyUnescaper is keyEscaper's inverse.
var keyUnescaper = strings.NewReplacer("%2F", "/", "%25", "%")

// SplitDocKey is the inverse of the DocKey of a relational row with n id
// columns: each column's text (a string as it is, an integer in plain
// digits, anything else as compact JSON), in id-column order. It returns
// false when key does not have n parts.
func SplitDocKey(key string, n int) ([]string, bool) {
	if n == 1 {
		return []string{key}, true
	}
	parts := strings.Split(key, "/")
	if n < 1 || len(parts) != n {
		return nil, false
	}
	for i, p := range parts {
		parts[i] = keyUnescaper.Replace(p)
	}
	return parts, true
}

// keyText is the canonical text of one key value: strings as they are,
// integers in plain digits whatever their JSON spelling, anything else as
// compact JSON (object keys sorted). A relational key column has one SQL
// type, so its values cannot collide across types; and a column whose type
// (or the connector's decimal mode) changes keeps its documents' ids.
func keyText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return canonicalNumber(v)
	case bool:
		return strconv.FormatBool(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// mongoKeyText renders a MongoDB id value, as sent (extended JSON), so that
// ids of different BSON types never share a text: MongoDB's _id index tells
// 1234 from "1234" and ObjectId("5f…") from "5f…". The common
// forms keep the text they always had: an ObjectId is its hex, a number its
// canonical digits (int, long and double 1 are one _id in MongoDB too), a
// string itself. A string that could be read as another type's text (a
// number, 24 hex digits, true/false/null, or text that starts like JSON) is
// written as a JSON-style quoted string instead; anything else (documents,
// arrays, dates, binaries) as compact JSON, with ObjectIds kept as
// {"$oid":…}.
func mongoKeyText(raw any) string {
	switch v := raw.(type) {
	case string:
		if stringLooksTyped(v) {
			return quoteKey(v)
		}
		return v
	case json.Number:
		return canonicalNumber(v)
	case bool:
		return strconv.FormatBool(v)
	case map[string]any:
		if oid, ok := v["$oid"].(string); ok && len(v) == 1 {
			return oid
		}
		if n, ok := mongoNumber(v); ok {
			return canonicalNumber(n)
		}
	}
	b, err := json.Marshal(mongoKeyJSON(deepCopy(raw, 0), 0))
	if err != nil {
		return fmt.Sprint(raw)
	}
	return string(b)
}

// mongoNumber reads a one-field number wrapper ($numberInt, $numberLong,
// $numberDouble, $numberDecimal) holding a JSON number.
func mongoNumber(m map[string]any) (json.Number, bool) {
	if len(m) != 1 {
		return "", false
	}
	for k, inner := range m {
		if !strings.HasPrefix(k, "$number") {
			return "", false
		}
		if r, ok := plainWrapper(k, inner); ok {
			n, isNum := r.(json.Number)
			return n, isNum
		}
	}
	return "", false
}

// mongoKeyJSON rewrites number wrappers to plain numbers (relaxed and
// canonical extended JSON then render alike) and leaves every other
// wrapper, $oid included, as it is.
func mongoKeyJSON(v any, depth int) any {
	if depth > maxDepth {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		if n, ok := mongoNumber(v); ok {
			return n
		}
		for k, e := range v {
			v[k] = mongoKeyJSON(e, depth+1)
		}
	case []any:
		for i, e := range v {
			v[i] = mongoKeyJSON(e, depth+1)
		}
	}
	return v
}

// stringLooksTyped reports whether s, written bare, could be the text of a
// non-string id.
func stringLooksTyped(s string) bool {
	switch {
	case s == "true" || s == "false" || s == "null":
		return true
	case isJSONNumber(s):
		return true
	case strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "{") || strings.HasPrefix(s, "["):
		return true
	case len(s) == 24 && strings.Trim(s, "0123456789abcdefABCDEF") == "":
		return true // an ObjectId's hex
	}
	return false
}

// quoteKey writes s between double quotes with '"' and '\' escaped, which
// no other rendering starts with.
func quoteKey(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// parseKey reads a message key: a JSON object, possibly in JsonConverter's
// {"schema","payload"} envelope. It returns the fields in key order (the
// primary key's column order) and their values with logical types decoded.
// A null or empty key returns no fields and no error.
//
// For MongoDB it also returns the "id" field as sent (see mongoKeyValue).
func parseKey(key []byte, mongo bool) ([]string, map[string]any, any, error) {
	if isNullJSON(key) {
		return nil, nil, nil, nil
	}
	v, err := parseJSON(key)
	if err != nil {
		return nil, nil, nil, decodeErr(reasonBadKey, "%v", err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, nil, nil, decodeErr(reasonBadKey, "want a JSON object, got %s", describe(v))
	}
	raw := key
	payload, schema := top, map[string]any(nil)
	if isConnectEnvelope(top) {
		if top["payload"] == nil {
			return nil, nil, nil, nil
		}
		if payload, ok = top["payload"].(map[string]any); !ok {
			return nil, nil, nil, decodeErr(reasonBadKey, "payload: want an object, got %s", describe(top["payload"]))
		}
		schema, _ = top["schema"].(map[string]any)
		var env struct{ Payload json.RawMessage }
		if err := json.NewDecoder(bytes.NewReader(key)).Decode(&env); err != nil {
			return nil, nil, nil, decodeErr(reasonBadKey, "%v", err)
		}
		raw = env.Payload
	}
	order, err := objectKeyOrder(raw)
	if err != nil {
		return nil, nil, nil, decodeErr(reasonBadKey, "%v", err)
	}
	return keyFields(payload, schema, order, mongo)
}

// keyFields converts a parsed key's logical types by its Connect schema
// and, for MongoDB, takes its "id" as sent; order is the key's field order.
func keyFields(payload, schema map[string]any, order []string, mongo bool) ([]string, map[string]any, any, error) {
	if typ, _ := schema["type"].(string); typ == "struct" {
		if err := convertRow(payload, schema); err != nil {
			return nil, nil, nil, decodeErr(reasonBadKey, "%v", err)
		}
	}
	var sent any
	if mongo && len(payload) == 1 && payload["id"] != nil {
		payload["id"], sent = mongoKeyValue(payload["id"])
	}
	return order, payload, sent, nil
}
