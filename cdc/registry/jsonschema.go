package registry

// JSON Schema records, as Confluent's JsonSchemaConverter writes them: the
// record's JSON (no schema/payload wrapper) after the five-byte header,
// under a JSON Schema that carries the Connect schema in its own keywords.
// The Connect schema is built once, when the schema is compiled, following
// Confluent's JsonSchemaData.toConnectSchema:
//
//	JSON Schema                                  Connect (JsonConverter's form)
//	"type": "boolean"                            boolean
//	"type": "integer"                            int64, or "connect.type" (int8…int64)
//	"type": "number"                             double, or "connect.type" (int8…
//	                                             int64, float32 → "float", float64
//	                                             → "double", bytes: a Decimal
//	                                             written as a number)
//	"type": "string"                             string, or bytes with
//	                                             "connect.type": "bytes"
//	"enum": [...]                                string with JsonSchemaData's
//	                                             io.confluent.connect.json.Enum
//	                                             parameters
//	"type": "object", "properties"               struct, fields ordered by
//	                                             "connect.index" (else as written)
//	"type": "object", "connect.type": "map",     map with string keys
//	"additionalProperties"
//	"type": "array", "connect.type": "map",      map with the items' "key" and
//	"items": {"properties": {key, value}}        "value" schemas
//	"type": "array", "items"                     array
//	"oneOf" (or "anyOf", or a "type" list) of    the other schema, optional
//	{"type": "null"} and one other schema
//	"title", "connect.version",                  name, version, parameters, doc,
//	"connect.parameters", "description",         default
//	"default"
//	"$ref" (a JSON pointer into the schema,      the schema it points to
//	a referenced schema by its name, or both)
//
// A property is required unless it is a oneOf with null, as JsonSchemaData
// reads it by default. Unions of several non-null schemas, allOf and
// schemas that allow any value have no Connect form that ragsync's reader
// uses: compiling them fails, naming where they are.
//
// Decoding does not validate the payload against the schema: the payload
// is JSON already, and what the Connect schema needs is checked where
// JSON's is, by the cdc reader, so a payload whose shape contradicts its
// schema (a string where connect.type is int32) is passed on and rejected
// there exactly as the same JSON record would be. The decoder only
// reshapes what JsonConverter writes differently from JsonSchemaConverter:
// a struct holds exactly its schema's fields (a missing one is null), a
// map with non-string keys becomes [[key, value], …] pairs, integers
// written with a fraction or exponent but an integral value become plain
// integers, and floating-point numbers are written as Java writes them
// ("20.0", "1.0E20").

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsEnumParam is JsonSchemaData's enum parameter.
const jsEnumParam = "io.confluent.connect.json.Enum"

// jsObject is a JSON object with its keys in the order written, so that
// properties without connect.index keep their order.
type jsObject struct {
	keys []string
	m    map[string]any
}

func (o *jsObject) get(k string) (any, bool) {
	v, ok := o.m[k]
	return v, ok
}

func (o *jsObject) str(k string) string {
	s, _ := o.m[k].(string)
	return s
}

// jsParseOrdered parses JSON, keeping objects' key order.
func jsParseOrdered(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := jsParseValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

const jsMaxDepth = 256

func jsParseValue(d *json.Decoder, depth int) (any, error) {
	if depth > jsMaxDepth {
		return nil, fmt.Errorf("nested deeper than %d", jsMaxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &jsObject{m: map[string]any{}}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := jsParseValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := o.m[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.m[k] = v
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := jsParseValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return tok, nil
}

// jsPlain turns a parsed value back into the JSON parser's tree, for
// defaults and parameters.
func jsPlain(v any) any {
	switch v := v.(type) {
	case *jsObject:
		m := make(map[string]any, len(v.m))
		for k, e := range v.m {
			m[k] = jsPlain(e)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsPlain(e)
		}
		return out
	}
	return v
}

// jsKind is how a JSON value is reshaped into JsonConverter's.
type jsKind int

const (
	jsAsIs jsKind = iota
	jsInteger
	jsFloat
	jsStruct
	jsArray
	jsMapObject
	jsMapPairs
)

// jsNode reshapes one value of a compiled JSON Schema.
type jsNode struct {
	kind   jsKind
	bits   int // a jsFloat's precision: 32 or 64
	fields []jsField
	// elem is an array's items and a map's values; key a map's keys.
	elem, key *jsNode
	// stringKeys makes a jsMapPairs an object.
	stringKeys bool
}

type jsField struct {
	name string
	node *jsNode
}

// jsonSchemaFormat decodes the records of one registered JSON Schema. It
// holds no mutable state, so it is safe for concurrent use. The Connect
// schema it returns is shared by every record: callers read it and never
// change it.
type jsonSchemaFormat struct {
	node   *jsNode
	schema map[string]any
}

// compileJSONSchema compiles a schema registered as JSON (text is the JSON
// Schema, refs the referenced schemas by name) into the format that
// decodes its records.
func compileJSONSchema(text string, refs map[string]string) (format, error) {
	root, err := jsParseOrdered([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("compile json schema: not JSON: %w", err)
	}
	c := &jsCompiler{docs: map[string]any{"": root}, refs: refs, active: map[string]bool{}, done: map[string]jsCompiled{}}
	node, schema, err := c.compile(root, "", "#", false)
	if err != nil {
		return nil, fmt.Errorf("compile json schema: %w", err)
	}
	return &jsonSchemaFormat{node: node, schema: schema}, nil
}

func (f *jsonSchemaFormat) decode(body []byte) (any, map[string]any, error) {
	if err := jsCheckText(body); err != nil {
		return nil, nil, fmt.Errorf("decode json schema record: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("decode json schema record: not JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("decode json schema record: data after the JSON value")
	}
	if v == nil {
		return nil, f.schema, nil
	}
	return f.node.value(v), f.schema, nil
}

// jsCompiler builds the Connect schema of a JSON Schema.
type jsCompiler struct {
	// docs are the parsed schemas: "" the registered one, else the
	// references by name.
	docs map[string]any
	refs map[string]string
	// active are the references being compiled, to refuse a schema that
	// contains itself.
	active map[string]bool
	// done are the references compiled, each once however many places
	// use it: definitions that each use the previous one twice, down many
	// levels, would otherwise take exponential time.
	done map[string]jsCompiled
}

type jsCompiled struct {
	node   *jsNode
	schema map[string]any
}

// compile builds the node and Connect schema of s, found at where in the
// document doc. optional is set by an enclosing oneOf with null.
func (c *jsCompiler) compile(s any, doc, where string, optional bool) (*jsNode, map[string]any, error) {
	fail := func(format string, args ...any) (*jsNode, map[string]any, error) {
		return nil, nil, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
	}
	o, ok := s.(*jsObject)
	if !ok {
		return fail("a schema that allows any value (%v) has no Connect type", jsPlain(s))
	}
	if ref := o.str("$ref"); ref != "" {
		return c.ref(ref, doc, where, optional)
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		if subs, ok := o.m[kw].([]any); ok {
			return c.union(subs, doc, where+"/"+kw, optional)
		}
	}
	if _, ok := o.m["allOf"]; ok {
		return fail("allOf has no Connect type")
	}
	typ, _ := o.m["type"].(string)
	if list, ok := o.m["type"].([]any); ok {
		// ["null", "string"] is a oneOf of two schemas.
		var subs []any
		for _, t := range list {
			if t == "null" {
				subs = append(subs, &jsObject{keys: []string{"type"}, m: map[string]any{"type": "null"}})
				continue
			}
			sub := &jsObject{m: map[string]any{}}
			for _, k := range o.keys {
				sub.keys, sub.m[k] = append(sub.keys, k), o.m[k]
			}
			sub.m["type"] = t
			subs = append(subs, sub)
		}
		return c.union(subs, doc, where+"/type", optional)
	}
	if typ == "" {
		switch {
		case o.m["enum"] != nil:
			typ = "string"
		case o.m["properties"] != nil:
			typ = "object"
		case o.m["items"] != nil:
			typ = "array"
		default:
			return fail("a schema without a type has no Connect type")
		}
	}
	connectType := o.str("connect.type")
	node := &jsNode{}
	var schema map[string]any
	switch typ {
	case "boolean":
		schema = map[string]any{"type": "boolean"}
	case "integer", "number":
		ct := connectType
		switch {
		case ct == "" && typ == "integer":
			ct = "int64"
		case ct == "":
			ct = "float64"
		}
		switch ct {
		case "int8", "int16", "int32", "int64":
			node.kind = jsInteger
		case "float32":
			node.kind, node.bits, ct = jsFloat, 32, "float"
		case "float64":
			node.kind, node.bits, ct = jsFloat, 64, "double"
		case "bytes": // a Decimal written as a number: cdc reads it as is
		default:
			return fail("connect.type %q is not a Connect number type", ct)
		}
		schema = map[string]any{"type": ct}
	case "string":
		schema = map[string]any{"type": "string"}
		if connectType == "bytes" {
			schema["type"] = "bytes"
		}
		if enum, ok := o.m["enum"].([]any); ok {
			ps := map[string]any{jsEnumParam: ""}
			for _, e := range enum {
				sym := "<NULL>"
				if e != nil {
					sym = fmt.Sprint(jsPlain(e))
				}
				ps[jsEnumParam+"."+sym] = sym
			}
			schema["parameters"] = ps
		}
	case "array":
		items, ok := o.m["items"]
		if !ok {
			return fail("an array schema without items has no Connect type")
		}
		if _, tuple := items.([]any); tuple {
			return fail("an array schema with a list of items (a tuple) has no Connect type")
		}
		if connectType == "map" {
			itemsObj, _ := items.(*jsObject)
			var props *jsObject
			if itemsObj != nil {
				props, _ = itemsObj.m["properties"].(*jsObject)
			}
			if props == nil || props.m["key"] == nil || props.m["value"] == nil {
				return fail("a map array's items want properties key and value")
			}
			kn, ks, err := c.compile(props.m["key"], doc, where+"/items/properties/key", false)
			if err != nil {
				return nil, nil, err
			}
			vn, vs, err := c.compile(props.m["value"], doc, where+"/items/properties/value", false)
			if err != nil {
				return nil, nil, err
			}
			node.kind, node.key, node.elem = jsMapPairs, kn, vn
			// JsonSchemaData writes optional string keys as pairs too;
			// JsonConverter writes every string-keyed map as an object.
			node.stringKeys = ks["type"] == "string"
			schema = map[string]any{"type": "map", "keys": ks, "values": vs}
			break
		}
		en, es, err := c.compile(items, doc, where+"/items", false)
		if err != nil {
			return nil, nil, err
		}
		node.kind, node.elem = jsArray, en
		schema = map[string]any{"type": "array", "items": es}
	case "object":
		if connectType == "map" {
			vn, vs, err := c.compile(o.m["additionalProperties"], doc, where+"/additionalProperties", false)
			if err != nil {
				return nil, nil, err
			}
			node.kind, node.elem = jsMapObject, vn
			schema = map[string]any{"type": "map", "keys": map[string]any{"type": "string", "optional": false}, "values": vs}
			break
		}
		node.kind = jsStruct
		fields := []any{}
		if props, ok := o.m["properties"].(*jsObject); ok {
			type prop struct {
				index int
				name  string
			}
			var order []prop
			for i, k := range props.keys {
				idx := i
				if po, ok := props.m[k].(*jsObject); ok {
					if n, ok := po.m["connect.index"].(json.Number); ok {
						if v, err := strconv.Atoi(string(n)); err == nil {
							idx = v
						}
					}
				}
				order = append(order, prop{idx, k})
			}
			slices.SortStableFunc(order, func(a, b prop) int { return a.index - b.index })
			for _, p := range order {
				fn, fs, err := c.compile(props.m[p.name], doc, where+"/properties/"+p.name, false)
				if err != nil {
					return nil, nil, err
				}
				fs["field"] = p.name
				node.fields = append(node.fields, jsField{p.name, fn})
				fields = append(fields, fs)
			}
		}
		schema = map[string]any{"type": "struct", "fields": fields}
	case "null":
		return fail("a null schema alone has no Connect type")
	default:
		return fail("type %q is not a JSON Schema type", typ)
	}
	if title := o.str("title"); title != "" {
		schema["name"] = title
	}
	if v, ok := o.m["connect.version"].(json.Number); ok {
		schema["version"] = v
	}
	if d := o.str("description"); d != "" {
		schema["doc"] = d
	}
	if ps, ok := o.m["connect.parameters"].(*jsObject); ok {
		params, _ := schema["parameters"].(map[string]any)
		if params == nil {
			params = map[string]any{}
		}
		for _, k := range ps.keys {
			params[k] = jsPlain(ps.m[k])
		}
		schema["parameters"] = params
	}
	if d, ok := o.m["default"]; ok {
		schema["default"] = jsPlain(d)
	}
	schema["optional"] = optional
	return node, schema, nil
}

// union compiles a oneOf or anyOf: with null and one other schema, the
// other schema made optional.
func (c *jsCompiler) union(subs []any, doc, where string, optional bool) (*jsNode, map[string]any, error) {
	var other []any
	null := false
	for _, s := range subs {
		if o, ok := s.(*jsObject); ok && o.m["type"] == "null" {
			null = true
			continue
		}
		other = append(other, s)
	}
	if len(other) == 1 {
		return c.compile(other[0], doc, where+"/0", optional || null)
	}
	return nil, nil, fmt.Errorf("%s: a union of %d schemas besides null has no Connect form that ragsync reads", where, len(other))
}

// ref compiles the schema a $ref names: a JSON pointer into the current
// document ("#/definitions/x"), a referenced schema by name ("item.json"),
// or a pointer into one ("item.json#/definitions/x").
func (c *jsCompiler) ref(ref, doc, where string, optional bool) (*jsNode, map[string]any, error) {
	name, pointer, _ := strings.Cut(ref, "#")
	if name == "" {
		name = doc
	}
	key := name + "#" + pointer
	if done, ok := c.done[key]; ok {
		return done.node, jsUse(done.schema, optional), nil
	}
	if c.active[key] {
		return nil, nil, fmt.Errorf("%s: $ref %q contains itself, which a Connect schema cannot describe", where, ref)
	}
	root, ok := c.docs[name]
	if !ok {
		text, found := c.refs[name]
		if !found {
			return nil, nil, fmt.Errorf("%s: $ref %q names %q, which is not among the schema's references; register it as a reference", where, ref, name)
		}
		var err error
		if root, err = jsParseOrdered([]byte(text)); err != nil {
			return nil, nil, fmt.Errorf("%s: reference %q is not JSON: %w", where, name, err)
		}
		c.docs[name] = root
	}
	target, err := jsPointer(root, pointer)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: $ref %q: %w", where, ref, err)
	}
	c.active[key] = true
	defer delete(c.active, key)
	node, schema, err := c.compile(target, name, ref, false)
	if err != nil {
		return nil, nil, err
	}
	c.done[key] = jsCompiled{node, schema}
	return node, jsUse(schema, optional), nil
}

// jsUse is a copy of a referenced schema for one place that uses it,
// which sets its own "field" and may make it optional.
func jsUse(s map[string]any, optional bool) map[string]any {
	out := make(map[string]any, len(s)+1)
	for k, v := range s {
		out[k] = v
	}
	if optional {
		out["optional"] = true
	}
	return out
}

// jsPointer resolves a JSON pointer ("/definitions/x") in v.
func jsPointer(v any, pointer string) (any, error) {
	if pointer == "" || pointer == "/" {
		return v, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur := v.(type) {
		case *jsObject:
			next, ok := cur.get(tok)
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur) {
				return nil, fmt.Errorf("no element %q", tok)
			}
			v = cur[i]
		default:
			return nil, fmt.Errorf("no %q", tok)
		}
	}
	return v, nil
}

// value reshapes one payload value into JsonConverter's form. A value
// whose shape contradicts the node is returned as it is.
func (n *jsNode) value(v any) any {
	if v == nil {
		return nil
	}
	switch n.kind {
	case jsInteger:
		if num, ok := v.(json.Number); ok {
			return jsIntegral(num)
		}
	case jsFloat:
		if num, ok := v.(json.Number); ok {
			if f, err := strconv.ParseFloat(string(num), n.bits); err == nil {
				return javaFloat(f, n.bits)
			}
		}
	case jsStruct:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := make(map[string]any, len(n.fields))
		for _, f := range n.fields {
			out[f.name] = f.node.value(m[f.name])
		}
		return out
	case jsArray:
		a, ok := v.([]any)
		if !ok {
			return v
		}
		for i, e := range a {
			a[i] = n.elem.value(e)
		}
		return a
	case jsMapObject:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for k, e := range m {
			m[k] = n.elem.value(e)
		}
		return m
	case jsMapPairs:
		a, ok := v.([]any)
		if !ok {
			return v
		}
		out := make([]any, len(a))
		obj := make(map[string]any, len(a))
		for i, e := range a {
			entry, ok := e.(map[string]any)
			if !ok {
				return v
			}
			k, val := n.key.value(entry["key"]), n.elem.value(entry["value"])
			if ks, isString := k.(string); n.stringKeys && isString {
				obj[ks] = val
			}
			out[i] = []any{k, val}
		}
		if n.stringKeys && len(obj) == len(a) {
			return obj
		}
		return out
	}
	return v
}

// jsMaxPayloadDepth is how deep a record's arrays and objects may nest,
// as for the cdc reader's JSON.
const jsMaxPayloadDepth = 128

// jsCheckText fails for what JSON converters reject but encoding/json
// quietly turns into U+FFFD (text that is not UTF-8, a \u escape of a
// lone UTF-16 surrogate), and for nesting deeper than jsMaxPayloadDepth,
// so that a record is refused exactly where the same JSON record is.
func jsCheckText(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("not UTF-8")
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '"':
			inString = false
		case inString && c == '\\':
			if i+5 >= len(b) || b[i+1] != 'u' {
				i++ // the escaped character
				continue
			}
			r, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
			if err != nil || !utf16.IsSurrogate(rune(r)) {
				i++
				continue
			}
			if r < 0xDC00 && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(b[i+8:i+12]), 16, 32); err == nil && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return fmt.Errorf("a \\u escape of a lone UTF-16 surrogate")
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > jsMaxPayloadDepth {
				return fmt.Errorf("nested deeper than %d levels", jsMaxPayloadDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// jsIntegral writes an integer that JSON wrote with a fraction or an
// exponent ("1.0", "1e3") as Java's intValue/longValue reads it, when its
// value is integral; anything else is left for the cdc reader to reject.
func jsIntegral(n json.Number) json.Number {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return n
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return n
	}
	return json.Number(r.Num().String())
}
