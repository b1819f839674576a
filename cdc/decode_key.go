package cdc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// keyEscaper makes a multi-column DocKey unambiguous: values are joined by
// "/", so "/" (and "%", the escape itself) inside a value is percent-escaped.
var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// documentKey finds the document's id: the configured id columns in the
// first row that has them all (after, before, MongoDB filter), else in the
// message key; with no columns configured, every field of the message key.
func (d *Decoder) documentKey(table string, mongo bool, rows []map[string]any, key []byte) (string, map[string]any, error) {
	cols := d.idColumns(table)
	if len(cols) > 0 {
		for _, row := range rows {
			if vals, ok := pick(row, cols); ok {
				return joinKey(cols, vals)
			}
		}
	}
	kcols, kmap, err := parseKey(key, mongo)
	if err != nil {
		return "", nil, err
	}
	if len(cols) > 0 {
		if mongo && len(cols) == 1 && cols[0] == "_id" && kmap["_id"] == nil && kmap["id"] != nil {
			// MongoDB keys name the document's _id "id".
			kmap = map[string]any{"_id": kmap["id"]}
		}
		if vals, ok := pick(kmap, cols); ok {
			return joinKey(cols, vals)
		}
		return "", nil, decodeErr(reasonNoKey, "columns %s not in after, before or the message key", strings.Join(cols, ", "))
	}
	if vals, ok := pick(kmap, kcols); ok && len(kcols) > 0 {
		return joinKey(kcols, vals)
	}
	return "", nil, &DecodeError{Reason: reasonNoKey}
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

func joinKey(cols []string, vals []any) (string, map[string]any, error) {
	key := make(map[string]any, len(cols))
	parts := make([]string, len(vals))
	for i, v := range vals {
		key[cols[i]] = v
		parts[i] = keyText(v)
	}
	if len(parts) == 1 {
		return parts[0], key, nil
	}
	for i, p := range parts {
		parts[i] = keyEscaper.Replace(p)
	}
	return strings.Join(parts, "/"), key, nil
}

// keyText is the canonical text of one key value: strings as they are,
// integers in plain digits whatever their JSON spelling, anything else as
// compact JSON (object keys sorted).
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

// parseKey reads a message key: a JSON object, possibly in JsonConverter's
// {"schema","payload"} envelope. It returns the fields in key order (the
// primary key's column order) and their values with logical types decoded.
// A null or empty key returns no fields and no error.
func parseKey(key []byte, mongo bool) ([]string, map[string]any, error) {
	if isNullJSON(key) {
		return nil, nil, nil
	}
	v, err := parseJSON(key)
	if err != nil {
		return nil, nil, decodeErr(reasonBadKey, "%v", err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, nil, decodeErr(reasonBadKey, "want a JSON object, got %s", describe(v))
	}
	raw := key
	payload, schema := top, map[string]any(nil)
	if isConnectEnvelope(top) {
		if top["payload"] == nil {
			return nil, nil, nil
		}
		if payload, ok = top["payload"].(map[string]any); !ok {
			return nil, nil, decodeErr(reasonBadKey, "payload: want an object, got %s", describe(top["payload"]))
		}
		schema, _ = top["schema"].(map[string]any)
		var env struct{ Payload json.RawMessage }
		if err := json.NewDecoder(bytes.NewReader(key)).Decode(&env); err != nil {
			return nil, nil, decodeErr(reasonBadKey, "%v", err)
		}
		raw = env.Payload
	}
	order, err := objectKeyOrder(raw)
	if err != nil {
		return nil, nil, decodeErr(reasonBadKey, "%v", err)
	}
	if typ, _ := schema["type"].(string); typ == "struct" {
		if err := convertRow(payload, schema); err != nil {
			return nil, nil, decodeErr(reasonBadKey, "%v", err)
		}
	}
	if mongo && len(payload) == 1 && payload["id"] != nil {
		payload["id"] = mongoKeyValue(payload["id"])
	}
	return order, payload, nil
}
