package registry

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
)

// encodeAvro writes a message as Confluent's AvroConverter would: the
// Connect schema as an Avro schema per AvroData's Connect → Avro mapping
// (connect.* properties, logical types for Connect's Decimal, Date, Time
// and Timestamp, optional fields as unions with null, maps with non-string
// keys as arrays of MapEntry records), and the payload (the JSON
// converter's tree) encoded with hamba's encoder. A payload its schema
// cannot hold (a string in an int32 field) skips the test: the JSON
// converter would not have written it either.
func encodeAvro(t testing.TB, connect map[string]any, payload any) (string, string, []byte) {
	t.Helper()
	text, body, err := avroEncode(connect, payload)
	var nr notRepresentable
	if errors.As(err, &nr) {
		t.Skipf("not representable in Avro: %v", err)
	}
	require.NoError(t, err)
	return "AVRO", text, body
}

// notRepresentable is a payload that contradicts its schema.
type notRepresentable struct{ error }

// avroEncode is encodeAvro's work: the Avro schema's text and the
// payload's bytes.
func avroEncode(connect map[string]any, payload any) (string, []byte, error) {
	e := &avroEncoder{defined: map[string]bool{}, byKey: map[string]string{}}
	text, err := json.Marshal(e.schema(connect))
	if err != nil {
		return "", nil, err
	}
	parsed, err := avro.ParseWithCache(string(text), "", &avro.SchemaCache{})
	if err != nil {
		return "", nil, fmt.Errorf("schema %s: %w", text, err)
	}
	v, err := e.value(connect, payload)
	if err != nil {
		return "", nil, notRepresentable{err}
	}
	// A configuration per message: hamba caches encoders by a fingerprint
	// that two schemas referring to a same-named record by name share.
	body, err := avro.Config{}.Freeze().Marshal(parsed, v)
	if err != nil {
		return "", nil, fmt.Errorf("schema %s: %w", text, err)
	}
	return string(text), body, nil
}

// avroEncoder converts one Connect schema to Avro, defining each named
// record once and referring to it by name after.
type avroEncoder struct {
	defined  map[string]bool   // Avro full names defined
	byKey    map[string]string // a struct's Connect schema, as JSON → its Avro full name
	defaults int
}

// structKey identifies a struct schema wherever it is used.
func structKey(c map[string]any) string {
	b, _ := json.Marshal(withoutFieldAndOptional(c))
	return string(b)
}

// avroName turns a Connect name into a valid Avro full name, as AvroData
// does with scrub.invalid.names.
func avroName(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		b := []byte(p)
		for j, c := range b {
			ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (j > 0 && c >= '0' && c <= '9')
			if !ok {
				b[j] = '_'
			}
		}
		if len(b) == 0 {
			b = []byte("_")
		}
		parts[i] = string(b)
	}
	return strings.Join(parts, ".")
}

// props copies the Connect name, version, doc and parameters to AvroData's
// connect.* properties.
func props(c, out map[string]any) {
	if n, ok := c["name"].(string); ok {
		out[propConnectName] = n
	}
	if v, ok := c["version"]; ok {
		n, _ := strconv.Atoi(fmt.Sprint(v))
		out[propConnectVersion] = n
	}
	if d, ok := c["doc"].(string); ok {
		out[propConnectDoc] = d
	}
	if p, ok := c["parameters"].(map[string]any); ok {
		out[propConnectParams] = p
	}
}

func (e *avroEncoder) schema(c map[string]any) any {
	typ, _ := c["type"].(string)
	name, _ := c["name"].(string)
	out := map[string]any{}
	props(c, out)
	switch typ {
	case "struct":
		key := structKey(c)
		if full, ok := e.byKey[key]; ok {
			return full // defined before, identically: refer to it by name
		}
		full := name
		if full == "" {
			e.defaults++
			full = avroDefault + strconv.Itoa(e.defaults)
		}
		full = avroName(full)
		if e.defined[full] {
			for i := 2; ; i++ { // another struct of the same name
				if !e.defined[full+strconv.Itoa(i)] {
					full += strconv.Itoa(i)
					break
				}
			}
		}
		e.defined[full] = true
		e.byKey[key] = full
		ns, short := "", full
		if i := strings.LastIndexByte(full, '.'); i >= 0 {
			ns, short = full[:i], full[i+1:]
		}
		out["type"] = "record"
		out["name"] = short
		if ns != "" {
			out["namespace"] = ns
		}
		var fields []any
		for _, f := range fieldsOf(c) {
			fn, _ := f["field"].(string)
			field := map[string]any{"name": fn, "type": e.optional(f)}
			if opt, _ := f["optional"].(bool); opt {
				if d, ok := avroDefaultValue(f); ok {
					field["default"] = d
				} else {
					field["default"] = nil
				}
			}
			fields = append(fields, field)
		}
		if fields == nil {
			fields = []any{}
		}
		out["fields"] = fields
		return out
	case "array":
		items, _ := c["items"].(map[string]any)
		out["type"] = "array"
		out["items"] = e.optional(items)
		return out
	case "map":
		keys, _ := c["keys"].(map[string]any)
		values, _ := c["values"].(map[string]any)
		if kt, _ := keys["type"].(string); kt == "string" {
			out["type"] = "map"
			out["values"] = e.optional(values)
			return out
		}
		out["type"] = "array"
		out["items"] = map[string]any{"type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro",
			"fields": []any{
				map[string]any{"name": "key", "type": e.optional(keys)},
				map[string]any{"name": "value", "type": e.optional(values)},
			}}
		return out
	case "int8", "int16":
		out["type"] = "int"
		out[propConnectType] = typ
	case "int32":
		out["type"] = "int"
		switch name {
		case connectDate:
			out["logicalType"] = "date"
		case connectTime:
			out["logicalType"] = "time-millis"
		}
	case "int64":
		out["type"] = "long"
		if name == connectTimestamp {
			out["logicalType"] = "timestamp-millis"
		}
	case "float":
		out["type"] = "float"
	case "double":
		out["type"] = "double"
	case "boolean", "string":
		out["type"] = typ
	case "bytes":
		out["type"] = "bytes"
		if name == connectDecimal {
			params, _ := c["parameters"].(map[string]any)
			scale, _ := strconv.Atoi(fmt.Sprint(params["scale"]))
			prec := 64 // AvroData's default when Connect gives none
			if p, ok := params[precisionParam]; ok {
				prec, _ = strconv.Atoi(fmt.Sprint(p))
			}
			out["logicalType"] = "decimal"
			out["precision"] = prec
			out["scale"] = scale
		}
	default:
		panic(fmt.Sprintf("no Avro type for Connect type %q", typ))
	}
	if len(out) == 1 {
		return out["type"]
	}
	return out
}

// optional is c's Avro type, in a union with null when c is optional:
// null first, unless the field's default is not null (Avro requires the
// default to match the first branch).
func (e *avroEncoder) optional(c map[string]any) any {
	s := e.schema(c)
	if opt, _ := c["optional"].(bool); !opt {
		return s
	}
	if _, ok := avroDefaultValue(c); ok {
		return []any{s, "null"}
	}
	return []any{"null", s}
}

// avroDefaultValue is a primitive field's non-null Connect default.
func avroDefaultValue(c map[string]any) (any, bool) {
	d, ok := c["default"]
	if !ok || d == nil {
		return nil, false
	}
	switch c["type"] {
	case "string", "boolean":
		return d, true
	case "int8", "int16", "int32", "int64":
		n, err := strconv.ParseInt(fmt.Sprint(d), 10, 64)
		return n, err == nil
	}
	return nil, false
}

func withoutFieldAndOptional(c map[string]any) map[string]any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		if k != "field" && k != "optional" && k != "default" {
			out[k] = v
		}
	}
	return out
}

func fieldsOf(c map[string]any) []map[string]any {
	fs, _ := c["fields"].([]any)
	out := make([]map[string]any, 0, len(fs))
	for _, f := range fs {
		if m, ok := f.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// unionName is the branch name hamba resolves a union value by: the type
// name, with its logical type for Connect's logical types.
func (e *avroEncoder) unionName(c map[string]any) string {
	switch c["name"] {
	case connectDecimal:
		return "bytes.decimal"
	case connectDate:
		return "int.date"
	case connectTime:
		return "int.time-millis"
	case connectTimestamp:
		return "long.timestamp-millis"
	}
	switch c["type"] {
	case "struct":
		return e.byKey[structKey(c)]
	case "array":
		return "array"
	case "map":
		if keys, _ := c["keys"].(map[string]any); keys["type"] == "string" {
			return "map"
		}
		return "array"
	case "int8", "int16", "int32":
		return "int"
	case "int64":
		return "long"
	}
	return fmt.Sprint(c["type"])
}

// value converts the JSON converter's tree v to what hamba encodes for c.
func (e *avroEncoder) value(c map[string]any, v any) (any, error) {
	opt, _ := c["optional"].(bool)
	if v == nil {
		if opt {
			return map[string]any{"null": nil}, nil
		}
		return nil, fmt.Errorf("null for a required %v", c["type"])
	}
	inner, err := e.plain(c, v)
	if err != nil || !opt {
		return inner, err
	}
	return map[string]any{e.unionName(c): inner}, nil
}

func (e *avroEncoder) plain(c map[string]any, v any) (any, error) {
	typ, _ := c["type"].(string)
	wrong := func() (any, error) { return nil, fmt.Errorf("%T %v for Connect type %s", v, v, typ) }
	switch typ {
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		out := make(map[string]any, len(m))
		fields := fieldsOf(c)
		if len(m) > len(fields) {
			return nil, fmt.Errorf("the payload has fields its schema lacks")
		}
		for _, f := range fields {
			name, _ := f["field"].(string)
			fv, err := e.value(f, m[name])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out[name] = fv
		}
		return out, nil
	case "array":
		a, ok := v.([]any)
		if !ok {
			return wrong()
		}
		items, _ := c["items"].(map[string]any)
		out := make([]any, len(a))
		for i, x := range a {
			xv, err := e.value(items, x)
			if err != nil {
				return nil, err
			}
			out[i] = xv
		}
		return out, nil
	case "map":
		keys, _ := c["keys"].(map[string]any)
		values, _ := c["values"].(map[string]any)
		if keys["type"] == "string" {
			m, ok := v.(map[string]any)
			if !ok {
				return wrong()
			}
			out := make(map[string]any, len(m))
			for k, x := range m {
				xv, err := e.value(values, x)
				if err != nil {
					return nil, err
				}
				out[k] = xv
			}
			return out, nil
		}
		pairs, ok := v.([]any)
		if !ok {
			return wrong()
		}
		out := make([]any, len(pairs))
		for i, p := range pairs {
			kv, ok := p.([]any)
			if !ok || len(kv) != 2 {
				return wrong()
			}
			k, err := e.value(keys, kv[0])
			if err != nil {
				return nil, err
			}
			x, err := e.value(values, kv[1])
			if err != nil {
				return nil, err
			}
			out[i] = map[string]any{"key": k, "value": x}
		}
		return out, nil
	case "int8", "int16", "int32", "int64":
		n, ok := v.(json.Number)
		if !ok {
			return wrong()
		}
		bits, _ := strconv.Atoi(typ[3:])
		i, err := strconv.ParseInt(string(n), 10, bits)
		if err != nil {
			return wrong()
		}
		if typ == "int64" {
			return i, nil
		}
		return int32(i), nil
	case "float", "double":
		var f float64
		switch x := v.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(x), 64); err != nil {
				return wrong()
			}
		case string:
			switch x {
			case "NaN":
				f = math.NaN()
			case "Infinity":
				f = math.Inf(1)
			case "-Infinity":
				f = math.Inf(-1)
			default:
				return wrong()
			}
		default:
			return wrong()
		}
		if typ == "float" {
			return float32(f), nil
		}
		return f, nil
	case "boolean":
		if reflect.TypeOf(v).Kind() != reflect.Bool {
			return wrong()
		}
		return v, nil
	case "string":
		if _, ok := v.(string); !ok {
			return wrong()
		}
		return v, nil
	case "bytes":
		s, ok := v.(string)
		if !ok {
			return wrong()
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return wrong()
		}
		return b, nil
	}
	return wrong()
}
