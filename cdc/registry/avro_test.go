package registry

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAvroTypes reads every Avro type into the JSON converter's tree and
// Connect schema, as AvroData maps them back.
func TestAvroTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		schema  string // the type of field "f"
		value   any    // as hamba encodes it
		want    any    // the JSON converter's value
		connect map[string]any
	}{
		{"int8", `{"type":"int","connect.type":"int8"}`, int32(-5), json.Number("-5"),
			map[string]any{"type": "int8", "optional": false, "field": "f"}},
		{"int16", `{"type":"int","connect.type":"int16"}`, int32(300), json.Number("300"),
			map[string]any{"type": "int16", "optional": false, "field": "f"}},
		{"long", `"long"`, int64(math.MaxInt64), json.Number("9223372036854775807"),
			map[string]any{"type": "int64", "optional": false, "field": "f"}},
		{"float", `"float"`, float32(1.1), json.Number("1.1"),
			map[string]any{"type": "float", "optional": false, "field": "f"}},
		{"float NaN", `"float"`, float32(math.NaN()), "NaN",
			map[string]any{"type": "float", "optional": false, "field": "f"}},
		{"double infinity", `"double"`, math.Inf(-1), "-Infinity",
			map[string]any{"type": "double", "optional": false, "field": "f"}},
		{"boolean", `"boolean"`, true, true,
			map[string]any{"type": "boolean", "optional": false, "field": "f"}},
		{"bytes", `"bytes"`, []byte{0, 1, 0xff}, "AAH/",
			map[string]any{"type": "bytes", "optional": false, "field": "f"}},
		{"fixed", `{"type":"fixed","name":"Two","size":2}`, [2]byte{1, 2}, "AQI=",
			map[string]any{"type": "bytes", "optional": false, "field": "f", "name": "Two", "parameters": map[string]any{"connect.fixed.size": "2"}}},
		{"enum", `{"type":"enum","name":"Color","namespace":"x","symbols":["RED","GREEN"]}`, "GREEN", "GREEN",
			map[string]any{"type": "string", "optional": false, "field": "f", "name": "x.Color",
				"parameters": map[string]any{"io.confluent.connect.avro.Enum": "x.Color", "io.confluent.connect.avro.Enum.RED": "RED", "io.confluent.connect.avro.Enum.GREEN": "GREEN"}}},
		{"string map", `{"type":"map","values":["null","long"]}`, map[string]any{"a": map[string]any{"long": int64(1)}, "b": map[string]any{"null": nil}},
			map[string]any{"a": json.Number("1"), "b": nil},
			map[string]any{"type": "map", "optional": false, "field": "f",
				"keys": map[string]any{"type": "string", "optional": false}, "values": map[string]any{"type": "int64", "optional": true}}},
		{"map with int keys", `{"type":"array","items":{"type":"record","name":"MapEntry","namespace":"io.confluent.connect.avro","fields":[{"name":"key","type":"int"},{"name":"value","type":"string"}]}}`,
			[]any{map[string]any{"key": int32(3), "value": "three"}}, []any{[]any{json.Number("3"), "three"}},
			map[string]any{"type": "map", "optional": false, "field": "f",
				"keys": map[string]any{"type": "int32", "optional": false}, "values": map[string]any{"type": "string", "optional": false}}},
		{"array of optional", `{"type":"array","items":["int","null"]}`, []any{map[string]any{"int": int32(1)}, map[string]any{"null": nil}},
			[]any{json.Number("1"), nil},
			map[string]any{"type": "array", "optional": false, "field": "f", "items": map[string]any{"type": "int32", "optional": true}}},
		{"union", `["int","string"]`, map[string]any{"string": "x"}, map[string]any{"int": nil, "string": "x"},
			map[string]any{"type": "struct", "optional": false, "field": "f", "name": "io.confluent.connect.avro.Union", "fields": []any{
				map[string]any{"type": "int32", "optional": true, "field": "int"},
				map[string]any{"type": "string", "optional": true, "field": "string"},
			}}},
		{"union with null", `["null","int","string"]`, map[string]any{"null": nil}, nil,
			map[string]any{"type": "struct", "optional": true, "field": "f", "name": "io.confluent.connect.avro.Union", "fields": []any{
				map[string]any{"type": "int32", "optional": true, "field": "int"},
				map[string]any{"type": "string", "optional": true, "field": "string"},
			}}},
		{"nested record", `{"type":"record","name":"In","fields":[{"name":"a","type":"string"}],"connect.version":2,"connect.doc":"inner"}`,
			map[string]any{"a": "z"}, map[string]any{"a": "z"},
			map[string]any{"type": "struct", "optional": false, "field": "f", "name": "In", "version": json.Number("2"), "doc": "inner",
				"fields": []any{map[string]any{"type": "string", "optional": false, "field": "a"}}}},
		{"unnamed Connect struct", `{"type":"record","name":"ConnectDefault2","namespace":"io.confluent.connect.avro","fields":[]}`,
			map[string]any{}, map[string]any{},
			map[string]any{"type": "struct", "optional": false, "field": "f", "fields": []any{}}},
		// Logical types from producers other than Connect get the Connect
		// or Debezium name that cdc decodes them by.
		{"decimal", `{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}`, []byte{0x30, 0x39}, "MDk=",
			map[string]any{"type": "bytes", "optional": false, "field": "f", "name": "org.apache.kafka.connect.data.Decimal",
				"parameters": map[string]any{"scale": "2", "connect.decimal.precision": "5"}}},
		{"fixed decimal", `{"type":"fixed","name":"D","size":2,"logicalType":"decimal","precision":4,"scale":1}`, [2]byte{0x30, 0x39}, "MDk=",
			map[string]any{"type": "bytes", "optional": false, "field": "f", "name": "org.apache.kafka.connect.data.Decimal",
				"parameters": map[string]any{"scale": "1", "connect.decimal.precision": "4"}}},
		{"date", `{"type":"int","logicalType":"date"}`, int32(17927), json.Number("17927"),
			map[string]any{"type": "int32", "optional": false, "field": "f", "name": "org.apache.kafka.connect.data.Date"}},
		{"time-millis", `{"type":"int","logicalType":"time-millis"}`, int32(1000), json.Number("1000"),
			map[string]any{"type": "int32", "optional": false, "field": "f", "name": "org.apache.kafka.connect.data.Time"}},
		{"timestamp-millis", `{"type":"long","logicalType":"timestamp-millis"}`, int64(1), json.Number("1"),
			map[string]any{"type": "int64", "optional": false, "field": "f", "name": "org.apache.kafka.connect.data.Timestamp"}},
		{"timestamp-micros", `{"type":"long","logicalType":"timestamp-micros"}`, int64(2), json.Number("2"),
			map[string]any{"type": "int64", "optional": false, "field": "f", "name": "io.debezium.time.MicroTimestamp"}},
		{"time-micros", `{"type":"long","logicalType":"time-micros"}`, 3 * time.Microsecond, json.Number("3"),
			map[string]any{"type": "int64", "optional": false, "field": "f", "name": "io.debezium.time.MicroTime"}},
		{"Debezium name wins", `{"type":"int","logicalType":"date","connect.name":"io.debezium.time.Date","connect.version":1}`, int32(1), json.Number("1"),
			map[string]any{"type": "int32", "optional": false, "field": "f", "name": "io.debezium.time.Date", "version": json.Number("1")}},
		{"optional with non-null default", `["string","null"]`, map[string]any{"string": "v"}, "v",
			map[string]any{"type": "string", "optional": true, "field": "f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := `{"type":"record","name":"R","fields":[{"name":"f","type":` + tc.schema + `}]}`
			f, err := compileAvro(text, nil)
			require.NoError(t, err)
			v, connect, err := f.decode(avroBody(t, text, map[string]any{"f": tc.value}))
			require.NoError(t, err)
			require.Equal(t, map[string]any{"f": tc.want}, v)
			require.Equal(t, tc.connect, connect["fields"].([]any)[0])
		})
	}
}

func TestCompileAvroRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		refs       map[string]string
		want       string
	}{
		{"not JSON", `{`, nil, "avro"},
		{"unknown type", `{"type":"record","name":"R","fields":[{"name":"f","type":"x.Missing"}]}`, nil, "unknown type"},
		{"recursive", `{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`, nil, "recursive"},
		{"bad reference", `"int"`, map[string]string{"x.Bad": `{"type":"nosuch"}`}, "reference x.Bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := compileAvro(tc.text, tc.refs)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCompileAvroReferencesInAnyOrder(t *testing.T) {
	t.Parallel()
	refs := map[string]string{
		"a.Outer": `{"type":"record","name":"Outer","namespace":"a","fields":[{"name":"in","type":"a.Inner"}]}`,
		"a.Inner": `{"type":"record","name":"Inner","namespace":"a","fields":[{"name":"n","type":"int"}]}`,
	}
	f, err := compileAvro(`{"type":"record","name":"Top","namespace":"a","fields":[{"name":"o","type":"a.Outer"}]}`, refs)
	require.NoError(t, err)
	v, _, err := f.decode([]byte{8})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"o": map[string]any{"in": map[string]any{"n": json.Number("4")}}}, v)
}

// FuzzDecodeAvro feeds arbitrary bytes to a compiled Debezium envelope: the
// decoder never panics, never allocates past the record's size, and a
// record it accepts is a struct.
func FuzzDecodeAvro(f *testing.F) {
	value, err := os.ReadFile(filepath.Join("..", "testdata", "pg-create-logical-types.json"))
	if err != nil {
		f.Fatal(err)
	}
	var env struct {
		Schema  map[string]any
		Payload any
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&env); err != nil {
		f.Fatal(err)
	}
	text, body, err := avroEncode(env.Schema, env.Payload)
	if err != nil {
		f.Fatal(err)
	}
	form, err := compileAvro(text, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	f.Add(body[:len(body)/2])
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _, err := form.decode(b)
		if err == nil {
			if _, ok := v.(map[string]any); !ok {
				t.Fatalf("accepted %x as %T", b, v)
			}
		}
	})
}
