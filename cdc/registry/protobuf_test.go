package registry

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ragsync/ragsync/cdc"
)

// formatRecord is one message of the corpus: its Connect schema (the one
// it carries, or one inferred from its values) and its payload.
type formatRecord struct {
	name    string
	connect map[string]any
	payload any
}

// formatsCorpus reads cdc/testdata/*.json and, when present, the held-out
// Debezium corpus, as the registry formats' encoders see them.
func formatsCorpus(t testing.TB) []formatRecord {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	held, _ := filepath.Glob(filepath.Join("..", "..", "..", "shared", "data", "debezium", "*.json"))
	files = append(files, held...)
	var out []formatRecord
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			continue // not JSON: nothing a converter wrote
		}
		top, ok := v.(map[string]any)
		if !ok {
			continue
		}
		payload := any(top)
		var connect map[string]any
		if _, hasSchema := top["schema"]; hasSchema && len(top) == 2 {
			if _, hasPayload := top["payload"]; hasPayload {
				payload = top["payload"]
				connect, _ = top["schema"].(map[string]any)
				if len(connect) == 0 {
					connect = nil
				}
			}
		}
		if payload == nil {
			continue // a tombstone
		}
		if connect == nil {
			connect = inferredConnect(payload)
			connect["optional"] = false
		}
		out = append(out, formatRecord{name: filepath.Base(f), connect: connect, payload: payload})
	}
	return out
}

// inferredConnect is the Connect schema of a schemaless value: int64 for
// integers, double for other numbers, string, boolean, a struct for an
// object (fields by name), an array of its first element's type; every
// part optional.
func inferredConnect(v any) map[string]any {
	switch v := v.(type) {
	case json.Number:
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return map[string]any{"type": "int64", "optional": true}
		}
		return map[string]any{"type": "double", "optional": true}
	case bool:
		return map[string]any{"type": "boolean", "optional": true}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fields := make([]any, len(keys))
		for i, k := range keys {
			f := inferredConnect(v[k])
			f["field"] = k
			fields[i] = f
		}
		return map[string]any{"type": "struct", "optional": true, "fields": fields}
	case []any:
		items := map[string]any{"type": "string", "optional": true}
		for _, e := range v {
			if e != nil {
				items = inferredConnect(e)
				break
			}
		}
		return map[string]any{"type": "array", "optional": true, "items": items}
	}
	return map[string]any{"type": "string", "optional": true}
}

// jsonConverterSchema is s as JsonConverter writes it: float types as
// "float" and "double", versions and parameters as the JSON parser gives
// them, "optional" always present.
func jsonConverterSchema(s map[string]any) map[string]any {
	out := make(map[string]any, len(s)+1)
	out["optional"] = false
	for k, v := range s {
		switch k {
		case "type":
			switch v {
			case "float32":
				v = "float"
			case "float64":
				v = "double"
			}
		case "version":
			v = json.Number(fmt.Sprint(v))
		case "parameters":
			ps := map[string]any{}
			for pk, pv := range v.(map[string]any) {
				ps[pk] = fmt.Sprint(pv)
			}
			v = ps
		case "fields":
			var fs []any
			for _, f := range v.([]any) {
				fs = append(fs, jsonConverterSchema(f.(map[string]any)))
			}
			if fs == nil {
				fs = []any{}
			}
			v = fs
		case "items", "keys", "values":
			v = jsonConverterSchema(v.(map[string]any))
		}
		out[k] = v
	}
	return out
}

// jsonConverterValue is v of schema s as JsonConverter writes it: a
// struct holds exactly its schema's fields, numbers are written as Java
// does (floats with Java's toString), and with emptyArrays a null array
// is [] (Protobuf's repeated fields have no null).
func jsonConverterValue(s map[string]any, v any, emptyArrays bool) any {
	if v == nil {
		if s["type"] == "array" && emptyArrays {
			return []any{}
		}
		return nil
	}
	switch s["type"] {
	case "struct":
		m := v.(map[string]any)
		out := map[string]any{}
		for _, f := range s["fields"].([]any) {
			fs := f.(map[string]any)
			name := fs["field"].(string)
			out[name] = jsonConverterValue(fs, m[name], emptyArrays)
		}
		return out
	case "array":
		a := v.([]any)
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = jsonConverterValue(s["items"].(map[string]any), e, emptyArrays)
		}
		return out
	case "float32", "float", "float64", "double":
		bits := 64
		if s["type"] == "float32" || s["type"] == "float" {
			bits = 32
		}
		if n, ok := v.(json.Number); ok {
			f, _ := strconv.ParseFloat(string(n), bits)
			return javaFloat(f, bits)
		}
	case "int8", "int16", "int32", "int64":
		if n, ok := v.(json.Number); ok {
			i, _ := strconv.ParseInt(string(n), 10, 64)
			return json.Number(strconv.FormatInt(i, 10))
		}
	}
	return v
}

func TestProtobufRoundTripCorpus(t *testing.T) {
	for _, r := range formatsCorpus(t) {
		t.Run(r.name, func(t *testing.T) {
			typ, text, body := encodeProtobuf(t, r.connect, r.payload)
			require.Equal(t, "PROTOBUF", typ)
			f, err := compileProtobuf(text, nil)
			require.NoError(t, err, text)
			got, schema, err := f.decode(body)
			require.NoError(t, err, text)
			if d := cmp.Diff(jsonConverterSchema(r.connect), schema); d != "" {
				t.Fatalf("schema (-want +got):\n%s\n%s", d, text)
			}
			if d := cmp.Diff(jsonConverterValue(r.connect, r.payload, true), got); d != "" {
				t.Fatalf("payload (-want +got):\n%s\n%s", d, text)
			}
		})
	}
}

// everyTypeSchema is a Connect schema with every type and logical type a
// Debezium connector writes, required and optional.
const everyTypeSchema = `{"type":"struct","optional":false,"name":"srv.db.every.Value","version":3,"fields":[
 {"type":"int8","optional":false,"field":"i8"},
 {"type":"int16","optional":true,"field":"i16"},
 {"type":"int32","optional":false,"field":"i32"},
 {"type":"int64","optional":true,"field":"i64"},
 {"type":"float","optional":false,"field":"f32"},
 {"type":"double","optional":true,"field":"f64"},
 {"type":"double","optional":true,"field":"big"},
 {"type":"boolean","optional":false,"field":"b"},
 {"type":"string","optional":true,"field":"s","default":"none"},
 {"type":"bytes","optional":true,"field":"raw"},
 {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"},
 {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"0"},"field":"count"},
 {"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1,"field":"cdate"},
 {"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"ctime"},
 {"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"cts"},
 {"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"ddate"},
 {"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"dts"},
 {"type":"int64","optional":true,"name":"io.debezium.time.NanoTime","version":1,"field":"dtime"},
 {"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"doc"},
 {"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"uid"},
 {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"red,green"},"field":"color"},
 {"type":"bytes","optional":true,"name":"io.debezium.data.Bits","version":1,"parameters":{"length":"3"},"field":"flags"},
 {"type":"struct","optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"field":"weight"},
 {"type":"struct","optional":false,"name":"io.debezium.data.geometry.Point","version":1,"fields":[{"type":"bytes","optional":false,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"}],"field":"place"},
 {"type":"array","optional":true,"items":{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1},"field":"holidays"},
 {"type":"array","optional":false,"items":{"type":"string","optional":false},"field":"tags"},
 {"type":"array","optional":true,"items":{"type":"struct","optional":true,"fields":[{"type":"string","optional":true,"field":"k"}]},"field":"pairs"},
 {"type":"map","optional":true,"keys":{"type":"string","optional":false},"values":{"type":"string","optional":true},"field":"labels"},
 {"type":"map","optional":true,"keys":{"type":"int32","optional":false},"values":{"type":"double","optional":false},"field":"scores"},
 {"type":"string","optional":true,"field":"order-id"},
 {"type":"string","optional":true,"field":"nothing"}
]}`

const everyTypePayload = `{"i8":-8,"i16":1600,"i32":-32,"i64":9007199254740993,"f32":1.5,"f64":20,"big":1e20,"b":true,"s":"text",
 "raw":"AAEC/w==","price":"D54=","count":"AA==","cdate":17927,"ctime":45296789,"cts":-1500,"ddate":-1,"dts":1548936781000001,"dtime":45296789012345,
 "doc":"{\"a\":[1,2]}","uid":"7b3c0b6e-1d7f-4f3c-9a53-2f0f7b6a9d11","color":"green","flags":"BQ==","weight":{"scale":3,"value":"AeJA"},
 "place":{"wkb":"AQE=","srid":null},"holidays":[17927,17928],"tags":[],"pairs":[{"k":"a"},{"k":null}],
 "labels":{"x":"1","y":"2"},"scores":[[2,0.5],[1,-3.25]],"order-id":"A-1","nothing":null}`

func parseTestJSON(t testing.TB, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

func TestProtobufRoundTripEveryType(t *testing.T) {
	connect := parseTestJSON(t, everyTypeSchema).(map[string]any)
	payload := parseTestJSON(t, everyTypePayload)
	_, text, body := encodeProtobuf(t, connect, payload)
	f, err := compileProtobuf(text, nil)
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
 "labels":{"x":"1","y":"2"},"scores":[[1,-3.25],[2,0.5]],"order-id":"A-1","nothing":null}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("payload (-want +got):\n%s\n%s", d, text)
	}
}

// protoBody frames a message after the given message indexes.
func protoBody(indexes []int64, msg []byte) []byte {
	b := binary.AppendVarint(nil, int64(len(indexes)))
	for _, i := range indexes {
		b = binary.AppendVarint(b, i)
	}
	return append(b, msg...)
}

// handWritten is a schema as ProtobufConverter registers one (wrappers,
// proto3 optional, an enum, a oneof, unsigned and zigzag integers, a
// map with integer keys), with options it does not know of, and two
// messages besides the first.
const handWritten = `syntax = "proto3";
package shop.v1;
import "google/protobuf/wrappers.proto";
import "google/protobuf/descriptor.proto";
import "confluent/meta.proto";

extend google.protobuf.FieldOptions { string ragsync_unknown = 50001; }

message First { string a = 1; }

message Order {
  enum Status { NEW = 0; PAID = 1; }
  message Line { int32 qty = 1; }
  int32 id = 1 [(ragsync_unknown) = "harmless", (confluent.field_meta) = {doc: "id", params: [{key: "unknown.key", value: "x"}]}];
  google.protobuf.StringValue note = 2;
  google.protobuf.Int32Value small = 3 [(confluent.field_meta) = {params: [{key: "connect.type", value: "int16"}]}];
  optional string maybe = 4;
  Status status = 5;
  oneof pay { string card = 6; int64 cash = 7; }
  uint64 big = 8;
  uint32 u32 = 9;
  sint32 s32 = 10;
  fixed64 f64 = 11;
  map<int64, string> notes = 12;
  repeated Line lines = 13;
  Line first = 14;
  bytes blob = 15;
  float ratio = 16;
}
`

func TestProtobufHandWritten(t *testing.T) {
	f, err := compileProtobuf(handWritten, nil)
	require.NoError(t, err)
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 7)
	// note: StringValue{value: "hi"}
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "hi"))
	// small and maybe unset; status PAID
	msg = protowire.AppendTag(msg, 5, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 1)
	msg = protowire.AppendTag(msg, 7, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 250)
	msg = protowire.AppendTag(msg, 8, protowire.VarintType)
	msg = protowire.AppendVarint(msg, math.MaxUint64)
	msg = protowire.AppendTag(msg, 9, protowire.VarintType)
	msg = protowire.AppendVarint(msg, math.MaxUint32)
	msg = protowire.AppendTag(msg, 10, protowire.VarintType)
	msg = protowire.AppendVarint(msg, protowire.EncodeZigZag(-5))
	for _, e := range []struct {
		k int64
		v string
	}{{10, "ten"}, {-2, "minus two"}} {
		entry := protowire.AppendTag(nil, 1, protowire.VarintType)
		entry = protowire.AppendVarint(entry, uint64(e.k))
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, e.v)
		msg = protowire.AppendTag(msg, 12, protowire.BytesType)
		msg = protowire.AppendBytes(msg, entry)
	}
	line := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3)
	msg = protowire.AppendTag(msg, 13, protowire.BytesType)
	msg = protowire.AppendBytes(msg, line)
	msg = protowire.AppendTag(msg, 16, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, math.Float32bits(0.1))

	got, schema, err := f.decode(protoBody([]int64{1}, msg))
	require.NoError(t, err)
	want := parseTestJSON(t, `{"pay_0":{"card":null,"cash":250},"id":7,"note":"hi","small":null,"maybe":null,"status":"PAID",
	 "big":-1,"u32":4294967295,"s32":-5,"f64":0,"notes":[[-2,"minus two"],[10,"ten"]],"lines":[{"qty":3}],"first":null,
	 "blob":"","ratio":0.1}`)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("payload (-want +got):\n%s", d)
	}
	wantSchema := parseTestJSON(t, `{"type":"struct","optional":false,"name":"shop.v1.Order","fields":[
	 {"type":"struct","optional":true,"name":"io.confluent.connect.protobuf.Union.pay","field":"pay_0","fields":[
	   {"type":"string","optional":true,"field":"card"},{"type":"int64","optional":true,"field":"cash"}]},
	 {"type":"int32","optional":false,"field":"id"},
	 {"type":"string","optional":true,"field":"note"},
	 {"type":"int16","optional":true,"field":"small"},
	 {"type":"string","optional":true,"field":"maybe"},
	 {"type":"string","optional":true,"name":"Status","field":"status","parameters":{
	   "io.confluent.connect.protobuf.Enum":"Status","io.confluent.connect.protobuf.Enum.NEW":"0","io.confluent.connect.protobuf.Enum.PAID":"1"}},
	 {"type":"int64","optional":false,"field":"big"},
	 {"type":"int64","optional":false,"field":"u32"},
	 {"type":"int32","optional":false,"field":"s32"},
	 {"type":"int64","optional":false,"field":"f64"},
	 {"type":"map","optional":true,"field":"notes","keys":{"type":"int64","optional":false},"values":{"type":"string","optional":false}},
	 {"type":"array","optional":true,"field":"lines","items":{"type":"struct","optional":true,"name":"shop.v1.Order.Line","fields":[{"type":"int32","optional":false,"field":"qty"}]}},
	 {"type":"struct","optional":true,"name":"shop.v1.Order.Line","field":"first","fields":[{"type":"int32","optional":false,"field":"qty"}]},
	 {"type":"bytes","optional":false,"field":"blob"},
	 {"type":"float","optional":false,"field":"ratio"}
	]}`)
	if d := cmp.Diff(wantSchema, schema); d != "" {
		t.Fatalf("schema (-want +got):\n%s", d)
	}

	// The nested message Order.Line: indexes [1, 0].
	got, schema, err = f.decode(protoBody([]int64{1, 0}, line))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"qty": json.Number("3")}, got)
	require.Equal(t, "shop.v1.Order.Line", schema["name"])

	// The first message, by the one-byte shortcut.
	got, _, err = f.decode(append([]byte{0}, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "x")...))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"a": "x"}, got)
}

func TestProtobufMessageIndexesBad(t *testing.T) {
	f, err := compileProtobuf(handWritten, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, wantErr string
		body          []byte
	}{
		{"empty", "cut short", nil},
		{"index past the file", "no message 2 at depth 0", protoBody([]int64{2}, nil)},
		{"nested index past the message", "no message 5 at depth 1", protoBody([]int64{1, 5}, nil)},
		{"negative index", "no message -1", protoBody([]int64{-1}, nil)},
		{"negative count", "message indexes", binary.AppendVarint(nil, -1)},
		{"count without indexes", "cut short", binary.AppendVarint(nil, 3)},
		{"huge count", "message indexes", binary.AppendVarint(nil, 1<<40)},
		{"overlong varint", "cut short", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.decode(tc.body)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestProtobufBodyTheSchemaCannotDecode(t *testing.T) {
	f, err := compileProtobuf(handWritten, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, wantErr string
		msg           []byte
	}{
		{"truncated field", "decode protobuf shop.v1.Order", []byte{0x08}},
		{"field number 0", "decode protobuf shop.v1.Order", []byte{0x00, 0x01}},
		{"group end without its start", "decode protobuf shop.v1.Order", protowire.AppendTag(nil, 4, protowire.EndGroupType)},
		{"string that is not UTF-8", "decode protobuf shop.v1.Order", protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte{0xff, 0xfe})},
		{"length past the end", "decode protobuf shop.v1.Order", append(protowire.AppendTag(nil, 4, protowire.BytesType), 50, 'a')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.decode(protoBody([]int64{1}, tc.msg))
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestProtobufLogicalTypesOutOfRange(t *testing.T) {
	const text = `syntax = "proto3";
import "google/type/date.proto";
import "google/type/timeofday.proto";
import "google/protobuf/timestamp.proto";
import "confluent/type/decimal.proto";
import "confluent/meta.proto";
message R {
  google.type.Date d = 1;
  google.type.TimeOfDay t = 2;
  google.protobuf.Timestamp ts = 3;
  confluent.type.Decimal dec = 4 [(confluent.field_meta) = {params: [{key: "scale", value: "2"}]}];
}`
	f, err := compileProtobuf(text, nil)
	require.NoError(t, err)
	sub := func(num protowire.Number, fields ...int64) []byte {
		var m []byte
		for i, v := range fields {
			m = protowire.AppendTag(m, protowire.Number(i+1), protowire.VarintType)
			m = protowire.AppendVarint(m, uint64(v))
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), m)
	}
	decimal := func(value []byte, scale int64) []byte {
		m := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), value)
		m = protowire.AppendVarint(protowire.AppendTag(m, 3, protowire.VarintType), uint64(scale))
		return protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), m)
	}

	got, _, err := f.decode(append([]byte{0}, append(append(sub(1, 2019, 1, 31), sub(2, 12, 34, 56, 789_000_000)...), decimal([]byte{0xff, 0x6a}, 1)...)...))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"d": json.Number("17927"), "t": json.Number("45296789"), "ts": nil, "dec": "+iQ="}, got)
	require.Equal(t, int64(-1500), unscaledOf(t, "+iQ="), "-15.0 at scale 1 is -1500 unscaled at the schema's scale 2")

	for _, tc := range []struct {
		name, wantErr string
		msg           []byte
	}{
		{"February 30th", "2019-02-30 is not a date", sub(1, 2019, 2, 30)},
		{"month 0", "is not a date", sub(1, 2019, 0, 1)},
		{"hour 24", "is not a time of day", sub(2, 24, 0, 0, 0)},
		{"negative nanos", "out of range", sub(3, 0, -1)},
		{"seconds past int64 milliseconds", "out of range", sub(3, math.MaxInt64/100)},
		{"decimal of a larger scale", "scale 3 does not fit the schema's scale 2", decimal([]byte{1}, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.decode(append([]byte{0}, tc.msg...))
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// unscaledOf reads a Decimal's base64 unscaled value.
func unscaledOf(t testing.TB, b64 string) int64 {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	var n int64
	for i, b := range raw {
		if i == 0 && b&0x80 != 0 {
			n = -1
		}
		n = n<<8 | int64(b)
	}
	return n
}

func TestProtobufReferences(t *testing.T) {
	refs := map[string]string{
		"common/money.proto":    `syntax = "proto3"; package common; import "common/currency.proto"; message Money { int64 units = 1; Currency currency = 2; }`,
		"common/currency.proto": `syntax = "proto3"; package common; enum Currency { EUR = 0; USD = 1; }`,
	}
	const text = `syntax = "proto3"; import "common/money.proto"; message Price { common.Money amount = 1; }`
	f, err := compileProtobuf(text, refs)
	require.NoError(t, err)
	money := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 12)
	money = protowire.AppendVarint(protowire.AppendTag(money, 2, protowire.VarintType), 1)
	got, schema, err := f.decode(append([]byte{0}, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), money)...))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"amount": map[string]any{"units": json.Number("12"), "currency": "USD"}}, got)
	require.Equal(t, "common.Money", schemaFieldOf(schema, "amount")["name"])

	delete(refs, "common/currency.proto")
	_, err = compileProtobuf(text, refs)
	require.ErrorContains(t, err, `import "common/currency.proto" is neither among the schema's references nor a well-known file`)

	_, err = compileProtobuf(`syntax = "proto3"; message A { int32 a = 1 }`, nil)
	require.ErrorContains(t, err, "compile protobuf schema")
	_, err = compileProtobuf(`syntax = "proto3"; enum E { X = 0; }`, nil)
	require.ErrorContains(t, err, "defines no message")
}

func schemaFieldOf(s map[string]any, name string) map[string]any {
	for _, f := range s["fields"].([]any) {
		if fm := f.(map[string]any); fm["field"] == name {
			return fm
		}
	}
	return nil
}

func TestProtobufRecursiveMessage(t *testing.T) {
	const text = `syntax = "proto3";
message Tree { string label = 1; repeated Tree children = 2; }
message Leaf { string label = 1; }`
	f, err := compileProtobuf(text, nil)
	require.NoError(t, err, "a file with a recursive message compiles")
	_, _, err = f.decode(protoBody([]int64{0}, nil))
	require.ErrorContains(t, err, "message Tree contains itself")
	got, _, err := f.decode(protoBody([]int64{1}, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "x")))
	require.NoError(t, err, "the file's other messages still decode")
	require.Equal(t, map[string]any{"label": "x"}, got)
}

func TestJavaFloat(t *testing.T) {
	// Java's Double.toString and Float.toString of the same values.
	for _, tc := range []struct {
		f    float64
		bits int
		want any
	}{
		{20, 64, json.Number("20.0")},
		{4.5, 64, json.Number("4.5")},
		{0.001, 64, json.Number("0.001")},
		{0.0001, 64, json.Number("1.0E-4")},
		{1e7, 64, json.Number("1.0E7")},
		{9999999, 64, json.Number("9999999.0")},
		{1.2345e20, 64, json.Number("1.2345E20")},
		{-1.5e-10, 64, json.Number("-1.5E-10")},
		{0, 64, json.Number("0.0")},
		{math.Copysign(0, -1), 64, json.Number("-0.0")},
		{float64(float32(0.1)), 32, json.Number("0.1")},
		{float64(float32(3.4e38)), 32, json.Number("3.4E38")},
		{math.NaN(), 64, "NaN"},
		{math.Inf(1), 64, "Infinity"},
		{math.Inf(-1), 32, "-Infinity"},
	} {
		require.Equal(t, tc.want, javaFloat(tc.f, tc.bits), "%v/%d", tc.f, tc.bits)
	}
}

// inMemorySchemas is a cdc.SchemaDecoder over compiled formats by
// schema id, without a registry: what the registry client does once it
// has fetched the schemas.
type inMemorySchemas map[int]format

func (d inMemorySchemas) DecodeFramed(_ context.Context, _ string, _ bool, b []byte) (any, map[string]any, error) {
	id, body, err := header(b)
	if err != nil {
		return nil, nil, err
	}
	f, ok := d[id]
	if !ok {
		return nil, nil, fmt.Errorf("schema id %d is unknown", id)
	}
	return f.decode(body)
}

// framedWith writes body in the registry's wire format under id.
func framedWith(id int, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...)
}

// readConnectRecord reads a JsonConverter record (schema and payload).
func readConnectRecord(t testing.TB, path string) (map[string]any, any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	top := parseTestJSON(t, string(b)).(map[string]any)
	return top["schema"].(map[string]any), top["payload"]
}

// encodeFunc is a registry format's test encoder.
type encodeFunc func(t testing.TB, connect map[string]any, payload any) (schemaType, schemaText string, body []byte)

// framedRecords encodes a testdata change's key and value with enc and
// returns the framed record and a decoder that knows both schemas.
func framedRecords(t testing.TB, name string, enc encodeFunc, compile func(string, map[string]string) (format, error)) (cdc.Record, cdc.Record, inMemorySchemas) {
	t.Helper()
	dir := filepath.Join("..", "testdata")
	vs, vp := readConnectRecord(t, filepath.Join(dir, name+".json"))
	ks, kp := readConnectRecord(t, filepath.Join(dir, name+".key.json"))
	_, vText, vBody := enc(t, vs, vp)
	_, kText, kBody := enc(t, ks, kp)
	vf, err := compile(vText, nil)
	require.NoError(t, err)
	kf, err := compile(kText, nil)
	require.NoError(t, err)
	rawV, err := os.ReadFile(filepath.Join(dir, name+".json"))
	require.NoError(t, err)
	rawK, err := os.ReadFile(filepath.Join(dir, name+".key.json"))
	require.NoError(t, err)
	topic := "dbserver1.public.articles"
	jsonRec := cdc.Record{Raw: cdc.Raw{Topic: topic, Key: rawK, Value: rawV}}
	framed := cdc.Record{Raw: cdc.Raw{Topic: topic, Key: framedWith(2, kBody), Value: framedWith(1, vBody)}}
	return jsonRec, framed, inMemorySchemas{1: vf, 2: kf}
}

func TestProtobufDecodesLikeJSON(t *testing.T) {
	jsonRec, framed, schemas := framedRecords(t, "pg-create-logical-types", encodeProtobuf, compileProtobuf)
	want, err := cdc.NewDecoder(cdc.DecoderConfig{}).Decode(jsonRec)
	require.NoError(t, err)
	got, err := cdc.NewDecoder(cdc.DecoderConfig{Schemas: schemas}).Decode(framed)
	require.NoError(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("change (-json +protobuf):\n%s", d)
	}
	require.Equal(t, "2019-01-31", got.After["published_on"], "a Debezium date decodes by its name")
	require.Equal(t, json.Number("39.98"), got.After["price"], "a Decimal decodes by its name and scale")

	// A body its schema cannot decode is a permanent decode error.
	framed.Value = framedWith(1, []byte{0, 0x0a, 0x05})
	_, err = cdc.NewDecoder(cdc.DecoderConfig{Schemas: schemas}).Decode(framed)
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de)
}

func BenchmarkDecodeProtobuf(b *testing.B) {
	benchmarkFormat(b, encodeProtobuf, compileProtobuf)
}

// benchmarkFormat decodes the pg-create-logical-types change through
// cdc.Decoder from JSON and from the format.
func benchmarkFormat(b *testing.B, enc encodeFunc, compile func(string, map[string]string) (format, error)) {
	jsonRec, framed, schemas := framedRecords(b, "pg-create-logical-types", enc, compile)
	for _, bc := range []struct {
		name string
		rec  cdc.Record
		d    *cdc.Decoder
	}{
		{"json", jsonRec, cdc.NewDecoder(cdc.DecoderConfig{})},
		{"framed", framed, cdc.NewDecoder(cdc.DecoderConfig{Schemas: schemas})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.rec.Value)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.d.Decode(bc.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestProtobufProto2Presence(t *testing.T) {
	const text = `syntax = "proto2";
message P {
  required int32 id = 1;
  optional string name = 2;
  optional int32 n = 3 [default = 5];
  repeated int32 xs = 4;
}
message WithGroup {
  optional group G = 1 { optional int32 a = 1; }
}`
	f, err := compileProtobuf(text, nil)
	require.NoError(t, err)
	got, schema, err := f.decode(append([]byte{0}, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9)...))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"id": json.Number("9"), "name": nil, "n": nil, "xs": []any{}}, got,
		"an unset proto2 optional field is null, whatever its default; an unset repeated field is empty")
	require.Equal(t, false, schemaFieldOf(schema, "id")["optional"])
	require.Equal(t, true, schemaFieldOf(schema, "name")["optional"])

	_, _, err = f.decode(protoBody([]int64{1}, nil))
	require.ErrorContains(t, err, "protobuf message WithGroup: field WithGroup.g: group fields have no Connect type")

	// proto2 strings are not checked for UTF-8: Java reads U+FFFD.
	body := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9)
	body = protowire.AppendBytes(protowire.AppendTag(body, 2, protowire.BytesType), []byte("a\xffb"))
	got, _, err = f.decode(append([]byte{0}, body...))
	require.NoError(t, err)
	require.Equal(t, "a\uFFFDb", got.(map[string]any)["name"])
}

func TestProtobufConcurrentDecode(t *testing.T) {
	f, err := compileProtobuf(handWritten, nil)
	require.NoError(t, err)
	line := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3)
	errs := make(chan error, 16)
	for i := range cap(errs) {
		go func() {
			// Half ask for Order, half for Order.Line: each plan is built
			// once, whoever asks first.
			indexes := []int64{1}
			if i%2 == 1 {
				indexes = []int64{1, 0}
			}
			_, _, err := f.decode(protoBody(indexes, line))
			errs <- err
		}()
	}
	for range cap(errs) {
		require.NoError(t, <-errs)
	}
}

// FuzzProtobufDecode checks that no body panics the decoder.
func FuzzProtobufDecode(f *testing.F) {
	connect, payload := readConnectRecord(f, filepath.Join("..", "testdata", "pg-create-logical-types.json"))
	_, text, body := encodeProtobuf(f, connect, payload)
	pf, err := compileProtobuf(text, nil)
	require.NoError(f, err)
	hw, err := compileProtobuf(handWritten, nil)
	require.NoError(f, err)
	f.Add(body)
	f.Add([]byte{0})
	f.Add(protoBody([]int64{1, 0}, []byte{8, 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, format := range []format{pf, hw} {
			v, s, err := format.decode(b)
			if err == nil {
				require.NotNil(t, v)
				require.NotNil(t, s)
			}
		}
	})
}

func TestProtobufSharedMessagesCompileOnce(t *testing.T) {
	// Each message uses the one before twice: 2^40 uses of M0, built once.
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\nmessage M0 { int32 x = 1; }\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "message M%d { M%d a = 1; M%d b = 2; }\n", i, i-1, i-1)
	}
	f, err := compileProtobuf(b.String(), nil)
	require.NoError(t, err)
	inner := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5))
	got, schema, err := f.decode(protoBody([]int64{1}, inner))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"a": nil, "b": map[string]any{"x": json.Number("5")}}, got)
	require.Equal(t, "M1", schema["name"])
	_, schema, err = f.decode(protoBody([]int64{40}, nil))
	require.NoError(t, err)
	require.Equal(t, "M39", schemaFieldOf(schema, "b")["name"])
}

// TestProtobufConverterDefaults decodes a schema as ProtobufConverter
// registers it with its default settings: optional Connect scalars are
// plain proto3 fields, and Debezium's own type names are gone.
func TestProtobufConverterDefaults(t *testing.T) {
	const text = `syntax = "proto3";
package dbserver1.public.articles;
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
import "google/type/date.proto";
message Value {
  int32 id = 1;
  string title = 2;
  confluent.type.Decimal price = 3 [(confluent.field_meta) = {params: [{key: "precision", value: "10"}, {key: "scale", value: "2"}]}];
  int32 published_on = 4;
  google.type.Date legacy_date = 5;
}`
	f, err := compileProtobuf(text, nil)
	require.NoError(t, err)
	msg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 42)
	dec := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0x0f, 0x9e})
	dec = protowire.AppendVarint(protowire.AppendTag(dec, 2, protowire.VarintType), 10)
	dec = protowire.AppendVarint(protowire.AppendTag(dec, 3, protowire.VarintType), 2)
	msg = protowire.AppendBytes(protowire.AppendTag(msg, 3, protowire.BytesType), dec)
	msg = protowire.AppendVarint(protowire.AppendTag(msg, 4, protowire.VarintType), 17927)
	date := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 2019)
	date = protowire.AppendVarint(protowire.AppendTag(date, 2, protowire.VarintType), 1)
	date = protowire.AppendVarint(protowire.AppendTag(date, 3, protowire.VarintType), 31)
	msg = protowire.AppendBytes(protowire.AppendTag(msg, 5, protowire.BytesType), date)

	got, schema, err := f.decode(append([]byte{0}, msg...))
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"id":           json.Number("42"),
		"title":        "", // a null title was written as no field
		"price":        "D54=",
		"published_on": json.Number("17927"), // io.debezium.time.Date lost its name: a number of days
		"legacy_date":  json.Number("17927"),
	}, got)
	require.Equal(t, map[string]any{"type": "int32", "optional": false, "field": "published_on"}, schemaFieldOf(schema, "published_on"))
	require.Equal(t, map[string]any{"type": "int32", "optional": true, "name": "org.apache.kafka.connect.data.Date", "version": json.Number("1"), "field": "legacy_date"},
		schemaFieldOf(schema, "legacy_date"))
	require.Equal(t, map[string]any{"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal", "version": json.Number("1"),
		"parameters": map[string]any{"scale": "2", "connect.decimal.precision": "10"}, "field": "price"}, schemaFieldOf(schema, "price"))
}

func TestProtobufRawPrimitives(t *testing.T) {
	for _, tc := range []struct {
		connect, payload string
	}{
		{`{"type":"string","optional":false}`, `"k-1"`},
		{`{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}`, `"7b3c0b6e-1d7f-4f3c-9a53-2f0f7b6a9d11"`},
		{`{"type":"int64","optional":false}`, `-9007199254740993`},
		{`{"type":"int8","optional":false}`, `-7`},
		{`{"type":"bytes","optional":false}`, `"AAE="`},
		{`{"type":"double","optional":false}`, `2.5`},
		{`{"type":"boolean","optional":false}`, `true`},
	} {
		t.Run(tc.connect, func(t *testing.T) {
			connect := parseTestJSON(t, tc.connect).(map[string]any)
			payload := parseTestJSON(t, tc.payload)
			_, text, body := encodeProtobuf(t, connect, payload)
			f, err := compileProtobuf(text, nil)
			require.NoError(t, err, text)
			got, schema, err := f.decode(body)
			require.NoError(t, err, text)
			require.Equal(t, jsonConverterSchema(connect), schema)
			require.Equal(t, jsonConverterValue(connect, payload, true), got)
		})
	}

	// The registered schema of a raw primitive is the wrappers file; the
	// message indexes pick the wrapper.
	const wrappers = `syntax = "proto3";
package google.protobuf;
message DoubleValue { double value = 1; }
message FloatValue { float value = 1; }
message Int64Value { int64 value = 1; }
message UInt64Value { uint64 value = 1; }
message Int32Value { int32 value = 1; }
message UInt32Value { uint32 value = 1; }
message BoolValue { bool value = 1; }
message StringValue { string value = 1; }
message BytesValue { bytes value = 1; }`
	f, err := compileProtobuf(wrappers, nil)
	require.NoError(t, err)
	got, schema, err := f.decode(protoBody([]int64{7}, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k-1")))
	require.NoError(t, err)
	require.Equal(t, "k-1", got)
	require.Equal(t, map[string]any{"type": "string", "optional": false}, schema)
	got, schema, err = f.decode(protoBody([]int64{5}, nil))
	require.NoError(t, err)
	require.Equal(t, json.Number("0"), got, "an unset wrapper value is its zero value")
	require.Equal(t, map[string]any{"type": "int64", "optional": false}, schema)
}
