package registry

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// encodeJSONSchema writes a record as Confluent's JsonSchemaConverter
// would, given its Connect schema in JsonConverter's form and its value
// as the JSON parser's tree: the JSON Schema to register (schemaType
// "JSON", built as JsonSchemaData.fromConnectSchema builds it) and the
// record's bytes after the five-byte header (the value as JSON, a map
// with non-string keys as [{"key": k, "value": v}, …]). A value that
// contradicts its schema is written as it is: JSON can carry it, and the
// cdc reader rejects it as it rejects the same JSON record.
func encodeJSONSchema(t testing.TB, connect map[string]any, payload any) (schemaType, schemaText string, body []byte) {
	t.Helper()
	if payload == nil {
		t.Skip("json schema: a null value is a tombstone, which the serializer writes as no bytes")
	}
	s, err := json.Marshal(jsFromConnect(connect, -1))
	if err != nil {
		t.Fatalf("encodeJSONSchema: schema: %v", err)
	}
	b, err := json.Marshal(jsPayload(connect, payload))
	if err != nil {
		t.Fatalf("encodeJSONSchema: payload: %v", err)
	}
	return "JSON", string(s), b
}

// jsFromConnect is the JSON Schema of a Connect schema; index ≥ 0 is the
// field's position in its struct (connect.index).
func jsFromConnect(s map[string]any, index int) map[string]any {
	out := map[string]any{}
	typ, _ := s["type"].(string)
	switch typ {
	case "int8", "int16", "int32", "int64":
		out["type"], out["connect.type"] = "integer", typ
	case "float32", "float":
		out["type"], out["connect.type"] = "number", "float32"
	case "float64", "double":
		out["type"], out["connect.type"] = "number", "float64"
	case "boolean":
		out["type"] = "boolean"
	case "string":
		out["type"] = "string"
	case "bytes":
		out["type"], out["connect.type"] = "string", "bytes"
	case "array":
		out["type"], out["items"] = "array", jsFromConnect(s["items"].(map[string]any), -1)
	case "map":
		keys := s["keys"].(map[string]any)
		vals := s["values"].(map[string]any)
		if ko, _ := keys["optional"].(bool); keys["type"] == "string" && !ko {
			out["type"], out["connect.type"], out["additionalProperties"] = "object", "map", jsFromConnect(vals, -1)
		} else {
			out["type"], out["connect.type"] = "array", "map"
			out["items"] = map[string]any{"type": "object", "properties": map[string]any{
				"key": jsFromConnect(keys, 0), "value": jsFromConnect(vals, 1),
			}}
		}
	case "struct":
		props := map[string]any{}
		for i, f := range pbSchemaFields(s) {
			props[f["field"].(string)] = jsFromConnect(f, i)
		}
		out["type"], out["properties"] = "object", props
	}
	if name, ok := s["name"].(string); ok && name != "" {
		out["title"] = name
	}
	if v, ok := s["version"]; ok {
		out["connect.version"] = json.Number(fmt.Sprint(v))
	}
	if d, ok := s["doc"].(string); ok {
		out["description"] = d
	}
	params := map[string]any{}
	for k, v := range pbParams(s) {
		if !strings.HasPrefix(k, "io.confluent.connect.json") {
			params[k] = v
		}
	}
	if len(params) > 0 {
		out["connect.parameters"] = params
	}
	if d, ok := s["default"]; ok {
		out["default"] = d
	}
	if opt, _ := s["optional"].(bool); opt {
		out = map[string]any{"oneOf": []any{map[string]any{"type": "null"}, out}}
	}
	if index >= 0 {
		out["connect.index"] = index
	}
	return out
}

// jsPayload is a Connect value as JsonSchemaConverter writes it: a
// struct with every field of its schema, a map with non-string keys as
// key/value objects.
func jsPayload(s map[string]any, v any) any {
	if v == nil {
		return nil
	}
	switch s["type"] {
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := map[string]any{}
		for _, f := range pbSchemaFields(s) {
			name := f["field"].(string)
			out[name] = jsPayload(f, m[name])
		}
		return out
	case "array":
		a, ok := v.([]any)
		if !ok {
			return v
		}
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = jsPayload(s["items"].(map[string]any), e)
		}
		return out
	case "map":
		keys := s["keys"].(map[string]any)
		vals := s["values"].(map[string]any)
		ko, _ := keys["optional"].(bool)
		switch m := v.(type) {
		case map[string]any:
			if keys["type"] == "string" && !ko {
				out := map[string]any{}
				for k, e := range m {
					out[k] = jsPayload(vals, e)
				}
				return out
			}
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			out := make([]any, len(names))
			for i, k := range names {
				out[i] = map[string]any{"key": k, "value": jsPayload(vals, m[k])}
			}
			return out
		case []any:
			out := make([]any, len(m))
			for i, p := range m {
				pair, ok := p.([]any)
				if !ok || len(pair) != 2 {
					return v
				}
				out[i] = map[string]any{"key": jsPayload(s["keys"].(map[string]any), pair[0]), "value": jsPayload(vals, pair[1])}
			}
			return out
		}
	}
	return v
}
