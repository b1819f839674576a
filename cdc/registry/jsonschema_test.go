package registry

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
)

func TestJSONSchemaRoundTripCorpus(t *testing.T) {
	for _, r := range formatsCorpus(t) {
		t.Run(r.name, func(t *testing.T) {
			typ, text, body := encodeJSONSchema(t, r.connect, r.payload)
			require.Equal(t, "JSON", typ)
			f, err := compileJSONSchema(text, nil)
			require.NoError(t, err, text)
			got, schema, err := f.decode(body)
			require.NoError(t, err, text)
			if d := cmp.Diff(jsonConverterSchema(r.connect), schema); d != "" {
				t.Fatalf("schema (-want +got):\n%s\n%s", d, text)
			}
			if d := cmp.Diff(jsonConverterValue(r.connect, r.payload, false), got); d != "" {
				t.Fatalf("payload (-want +got):\n%s\n%s", d, text)
			}
		})
	}
}

func TestJSONSchemaRoundTripEveryType(t *testing.T) {
	connect := parseTestJSON(t, everyTypeSchema).(map[string]any)
	payload := parseTestJSON(t, everyTypePayload)
	_, text, body := encodeJSONSchema(t, connect, payload)
	f, err := compileJSONSchema(text, nil)
	require.NoError(t, err, text)
	got, schema, err := f.decode(body)
	require.NoError(t, err, text)
	if d := cmp.Diff(jsonConverterSchema(connect), schema); d != "" {
		t.Fatalf("schema (-want +got):\n%s\n%s", d, text)
	}
	want := parseTestJSON(t, `{"i8":-8,"i16":1600,"i32":-32,"i64":9007199254740993,"f32":1.5,"f64":20.0,"big":1.0E20,"b":true,"s":"text",
 "raw":"AAEC/w==","price":"D54=","count":"AA==","cdate":17927,"ctime":45296789,"cts":-1500,"ddate":-1,"dts":1548936781000001,"dtime":45296789012345,
 "doc":"{\"a\":[1,2]}","uid":"7b3c0b6e-1d7f-4f3c-9a53-2f0f7b6a9d11","color":"green","flags":"BQ==","weight":{"scale":3,"value":"AeJA"},
 "place":{"wkb":"AQE=","srid":null},"holidays":[17927,17928],"tags":[],"pairs":[{"k":"a"},{"k":null}],
 "labels":{"x":"1","y":"2"},"scores":[[2,0.5],[1,-3.25]],"order-id":"A-1","nothing":null}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("payload (-want +got):\n%s\n%s", d, text)
	}
}

// handWrittenJSONSchema is a JSON Schema written by hand rather than by
// the converter: no connect.type, a "type" list, definitions, required
// and unknown keywords, properties out of connect.index order.
const handWrittenJSONSchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "shop.Order",
  "type": "object",
  "additionalProperties": false,
  "required": ["id"],
  "x-unknown": {"harmless": true},
  "definitions": {
    "line": {"type": "object", "title": "shop.Line", "properties": {"qty": {"type": "integer"}, "sku": {"type": "string"}}}
  },
  "properties": {
    "note": {"type": ["null", "string"], "connect.index": 2, "description": "free text"},
    "id": {"type": "integer", "connect.type": "int32", "connect.index": 0, "minimum": 1},
    "total": {"type": "number", "connect.index": 1},
    "status": {"enum": ["NEW", "PAID"], "connect.index": 3},
    "lines": {"type": "array", "items": {"$ref": "#/definitions/line"}, "connect.index": 4},
    "first": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/line"}], "connect.index": 5},
    "customer": {"$ref": "customer.json", "connect.index": 6},
    "price": {"type": "number", "connect.type": "bytes", "title": "org.apache.kafka.connect.data.Decimal", "connect.version": 1,
              "connect.parameters": {"scale": "2"}, "connect.index": 7}
  }
}`

func TestJSONSchemaHandWritten(t *testing.T) {
	refs := map[string]string{"customer.json": `{"type": "object", "title": "shop.Customer", "properties": {"name": {"type": "string"}}}`}
	f, err := compileJSONSchema(handWrittenJSONSchema, refs)
	require.NoError(t, err)
	got, schema, err := f.decode([]byte(`{"id": 7.0, "total": 12, "note": null, "status": "PAID", "extra": "dropped",
	  "lines": [{"qty": 2, "sku": "a"}], "first": null, "customer": {"name": "Ann"}, "price": 39.98}`))
	require.NoError(t, err)
	want := parseTestJSON(t, `{"id": 7, "total": 12.0, "note": null, "status": "PAID",
	  "lines": [{"qty": 2, "sku": "a"}], "first": null, "customer": {"name": "Ann"}, "price": 39.98}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("payload (-want +got):\n%s", d)
	}
	line := `{"type":"struct","name":"shop.Line","fields":[{"type":"int64","optional":false,"field":"qty"},{"type":"string","optional":false,"field":"sku"}]`
	wantSchema := parseTestJSON(t, `{"type":"struct","optional":false,"name":"shop.Order","fields":[
	 {"type":"int32","optional":false,"field":"id"},
	 {"type":"double","optional":false,"field":"total"},
	 {"type":"string","optional":true,"doc":"free text","field":"note"},
	 {"type":"string","optional":false,"field":"status","parameters":{"io.confluent.connect.json.Enum":"","io.confluent.connect.json.Enum.NEW":"NEW","io.confluent.connect.json.Enum.PAID":"PAID"}},
	 {"type":"array","optional":false,"field":"lines","items":`+line+`,"optional":false}},
	 `+line+`,"optional":true,"field":"first"},
	 {"type":"struct","optional":false,"name":"shop.Customer","field":"customer","fields":[{"type":"string","optional":false,"field":"name"}]},
	 {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"},"field":"price"}
	]}`)
	if d := cmp.Diff(wantSchema, schema); d != "" {
		t.Fatalf("schema (-want +got):\n%s", d)
	}
}

func TestJSONSchemaMaps(t *testing.T) {
	connect := parseTestJSON(t, `{"type":"struct","optional":false,"fields":[
	 {"type":"map","optional":true,"keys":{"type":"string","optional":true},"values":{"type":"int32","optional":true},"field":"optional_keys"},
	 {"type":"map","optional":true,"keys":{"type":"boolean","optional":false},"values":{"type":"string","optional":true},"field":"bool_keys"}]}`).(map[string]any)
	payload := parseTestJSON(t, `{"optional_keys":{"a":1,"b":null},"bool_keys":[[true,"yes"],[false,null]]}`)
	_, text, body := encodeJSONSchema(t, connect, payload)
	require.Contains(t, string(body), `"optional_keys":[{`, "JsonSchemaData writes optional string keys as pairs")
	f, err := compileJSONSchema(text, nil)
	require.NoError(t, err)
	got, schema, err := f.decode(body)
	require.NoError(t, err)
	require.Equal(t, jsonConverterSchema(connect), schema)
	optionalKeys := got.(map[string]any)["optional_keys"]
	require.Equal(t, map[string]any{"a": json.Number("1"), "b": nil}, optionalKeys, "JsonConverter writes string keys as an object")
	require.Equal(t, []any{[]any{true, "yes"}, []any{false, nil}}, got.(map[string]any)["bool_keys"])
}

func TestJSONSchemaCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, schema, wantErr string
		refs                  map[string]string
	}{
		{"not JSON", `{"type":`, "compile json schema: not JSON", nil},
		{"trailing data", `{"type":"string"} {}`, "data after the JSON value", nil},
		{"missing reference", `{"type":"object","properties":{"c":{"$ref":"customer.json"}}}`,
			`#/properties/c: $ref "customer.json" names "customer.json", which is not among the schema's references`, nil},
		{"reference not JSON", `{"$ref":"c.json"}`, `reference "c.json" is not JSON`, map[string]string{"c.json": "{"}},
		{"pointer to nothing", `{"type":"object","properties":{"c":{"$ref":"#/definitions/nope"}}}`, `$ref "#/definitions/nope": no "definitions"`, nil},
		{"recursive", `{"definitions":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/t"}}}}},"$ref":"#/definitions/t"}`,
			"contains itself", nil},
		{"union", `{"type":"object","properties":{"u":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`,
			"#/properties/u/oneOf: a union of 2 schemas besides null", nil},
		{"allOf", `{"allOf":[{"type":"string"}]}`, "allOf has no Connect type", nil},
		{"any value", `{"type":"object","properties":{"x":true}}`, "#/properties/x: a schema that allows any value", nil},
		{"no type", `{"title":"x"}`, "a schema without a type", nil},
		{"array without items", `{"type":"array"}`, "an array schema without items", nil},
		{"tuple", `{"type":"array","items":[{"type":"string"}]}`, "a list of items (a tuple)", nil},
		{"unknown connect.type", `{"type":"number","connect.type":"int128"}`, `connect.type "int128"`, nil},
		{"map array without key", `{"type":"array","connect.type":"map","items":{"type":"object","properties":{"value":{"type":"string"}}}}`, "want properties key and value", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileJSONSchema(tc.schema, tc.refs)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestJSONSchemaDecodeBodies(t *testing.T) {
	f, err := compileJSONSchema(`{"type":"object","title":"r.Value","properties":{"n":{"type":"integer","connect.type":"int32","connect.index":0}}}`, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, body, wantErr string
		want                any
	}{
		{name: "not JSON", body: `{"n":`, wantErr: "decode json schema record: not JSON"},
		{name: "trailing data", body: `{"n":1} x`, wantErr: "data after the JSON value"},
		{name: "empty", body: ``, wantErr: "not JSON"},
		{name: "null is a tombstone", body: `null`, want: nil},
		{name: "integral with exponent", body: `{"n":1e3}`, want: map[string]any{"n": json.Number("1000")}},
		{name: "a string where int32 is passed on", body: `{"n":"1"}`, want: map[string]any{"n": "1"}},
		{name: "a fraction where int32 is passed on", body: `{"n":1.5}`, want: map[string]any{"n": json.Number("1.5")}},
		{name: "not an object is passed on", body: `[1]`, want: []any{json.Number("1")}},
		{name: "a missing field is null", body: `{}`, want: map[string]any{"n": nil}},
		{name: "not UTF-8", body: "{\"s\":\"\xff\"}", wantErr: "not UTF-8"},
		{name: "lone high surrogate", body: `{"s":"\ud800x"}`, wantErr: "lone UTF-16 surrogate"},
		{name: "lone low surrogate", body: `{"s":"\udc00"}`, wantErr: "lone UTF-16 surrogate"},
		{name: "surrogate pair", body: `{"s":"\ud83d\ude00"}`, want: map[string]any{"n": nil}},
		{name: "an escaped backslash before u is text", body: `{"s":"\\ud800"}`, want: map[string]any{"n": nil}},
		{name: "nested too deep", body: strings.Repeat("[", 129) + strings.Repeat("]", 129), wantErr: "nested deeper than 128 levels"},
		{name: "brackets in strings do not nest", body: `{"s":"` + strings.Repeat("[", 200) + `"}`, want: map[string]any{"n": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, schema, err := f.decode([]byte(tc.body))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, "r.Value", schema["name"])
		})
	}
}

func TestJSONSchemaDecodesLikeJSON(t *testing.T) {
	jsonRec, framed, schemas := framedRecords(t, "pg-create-logical-types", encodeJSONSchema, compileJSONSchema)
	want, err := cdc.NewDecoder(cdc.DecoderConfig{}).Decode(jsonRec)
	require.NoError(t, err)
	got, err := cdc.NewDecoder(cdc.DecoderConfig{Schemas: schemas}).Decode(framed)
	require.NoError(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("change (-json +json schema):\n%s", d)
	}
	require.Equal(t, "2019-01-31", got.After["published_on"], "a Debezium date decodes by its name")

	// A payload that contradicts its schema is rejected by the cdc reader,
	// as the same JSON record is.
	framed.Value = framedWith(1, []byte(`{"before":null,"after":{"id":"forty-two"},"source":{"version":"2.7.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1,"db":"app","schema":"public","table":"articles","lsn":1},"op":"c"}`))
	_, err = cdc.NewDecoder(cdc.DecoderConfig{Schemas: schemas}).Decode(framed)
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de)
	require.ErrorContains(t, err, "int32")
}

func BenchmarkDecodeJSONSchema(b *testing.B) {
	benchmarkFormat(b, encodeJSONSchema, compileJSONSchema)
}

// FuzzJSONSchemaCompile checks that no schema panics the compiler, and
// that a compiled one decodes any body without panicking.
func FuzzJSONSchemaCompile(f *testing.F) {
	connect, payload := readConnectRecord(f, filepath.Join("..", "testdata", "pg-create-logical-types.key.json"))
	_, text, body := encodeJSONSchema(f, connect, payload)
	f.Add(text, body)
	f.Add(handWrittenJSONSchema, []byte(`{"id":1}`))
	f.Add(`{"$ref":"#"}`, []byte(`{}`))
	f.Add(`{"type":["null","integer","string"]}`, []byte(`1`))
	f.Fuzz(func(t *testing.T, schema string, b []byte) {
		format, err := compileJSONSchema(schema, nil)
		if err != nil {
			return
		}
		_, s, err := format.decode(b)
		if err == nil {
			require.NotNil(t, s)
		}
	})
}

func TestJSONSchemaSharedReferencesCompileOnce(t *testing.T) {
	// Each definition uses the one before twice: 2^40 uses of d0, built
	// once.
	var b strings.Builder
	b.WriteString(`{"$ref":"#/definitions/d40","definitions":{"d0":{"type":"integer","connect.type":"int32"}`)
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, `,"d%d":{"type":"object","title":"t%d","properties":{"a":{"$ref":"#/definitions/d%d"},"b":{"oneOf":[{"type":"null"},{"$ref":"#/definitions/d%d"}]}}}`, i, i, i-1, i-1)
	}
	b.WriteString(`}}`)
	f, err := compileJSONSchema(b.String(), nil)
	require.NoError(t, err)
	got, schema, err := f.decode([]byte(`{"a":{"b":null}}`))
	require.NoError(t, err)
	require.Equal(t, "t40", schema["name"])
	a := schemaFieldOf(schema, "a")
	require.Equal(t, false, a["optional"], "a uses d39 as it is")
	require.Equal(t, true, schemaFieldOf(schema, "b")["optional"], "b uses the same d39, made optional")
	require.Equal(t, "b", schemaFieldOf(a, "b")["field"], "each use has its own field name")
	require.Equal(t, "t38", schemaFieldOf(a, "b")["name"])
	require.Equal(t, map[string]any{"a": map[string]any{"a": nil, "b": nil}, "b": nil}, got)
}

func TestJSONSchemaPrimitiveRecords(t *testing.T) {
	for _, tc := range []struct {
		connect, payload string
	}{
		{`{"type":"string","optional":false}`, `"k-1"`},
		{`{"type":"int8","optional":false}`, `-7`},
		{`{"type":"float","optional":false}`, `0.1`},
		{`{"type":"bytes","optional":false,"name":"io.debezium.data.Bits","version":1,"parameters":{"length":"3"}}`, `"BQ=="`},
		{`{"type":"array","optional":false,"items":{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1}}`, `[1,null]`},
	} {
		t.Run(tc.connect, func(t *testing.T) {
			connect := parseTestJSON(t, tc.connect).(map[string]any)
			payload := parseTestJSON(t, tc.payload)
			_, text, body := encodeJSONSchema(t, connect, payload)
			f, err := compileJSONSchema(text, nil)
			require.NoError(t, err, text)
			got, schema, err := f.decode(body)
			require.NoError(t, err, text)
			require.Equal(t, jsonConverterSchema(connect), schema)
			require.Equal(t, jsonConverterValue(connect, payload, false), got)
		})
	}
}
