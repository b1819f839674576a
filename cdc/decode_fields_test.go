package cdc

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSnapshotFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		v       any
		want    bool
		wantErr bool
	}{
		{name: "absent", v: nil},
		{name: "bool true", v: true, want: true},
		{name: "bool false", v: false},
		{name: "string true", v: "true", want: true},
		{name: "string last", v: "last", want: true},
		{name: "string first", v: "first", want: true},
		{name: "string incremental", v: "incremental", want: true},
		{name: "string last_in_data_collection", v: "last_in_data_collection", want: true},
		{name: "string false", v: "false"},
		{name: "string FALSE", v: "FALSE"},
		{name: "empty string", v: ""},
		{name: "number", v: json.Number("1"), wantErr: true},
		{name: "object", v: map[string]any{}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := snapshotFlag(map[string]any{"snapshot": tc.v})
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestKeyText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cols []string
		vals []any
		want string
	}{
		{name: "int", cols: []string{"id"}, vals: []any{json.Number("1004")}, want: "1004"},
		{name: "int spelled as float", cols: []string{"id"}, vals: []any{json.Number("1004.0")}, want: "1004"},
		{name: "int with exponent", cols: []string{"id"}, vals: []any{json.Number("1.004e3")}, want: "1004"},
		{name: "huge exponent kept verbatim", cols: []string{"id"}, vals: []any{json.Number("1e999999999")}, want: "1e999999999"},
		{name: "big int exact", cols: []string{"id"}, vals: []any{json.Number("9007199254740993")}, want: "9007199254740993"},
		{name: "decimal", cols: []string{"id"}, vals: []any{json.Number("39.98")}, want: "39.98"},
		{name: "negative zero", cols: []string{"id"}, vals: []any{json.Number("-0")}, want: "0"},
		{name: "single string not escaped", cols: []string{"slug"}, vals: []any{"a/b%c"}, want: "a/b%c"},
		{name: "bool", cols: []string{"flag"}, vals: []any{true}, want: "true"},
		{name: "object as compact sorted json", cols: []string{"_id"}, vals: []any{map[string]any{"b": json.Number("2"), "a": "x"}}, want: `{"a":"x","b":2}`},
		{name: "composite escapes", cols: []string{"tenant", "slug"}, vals: []any{"ac/me", "50%/off"}, want: "ac%2Fme/50%25%2Foff"},
		{name: "composite mixed", cols: []string{"tenant", "id"}, vals: []any{"acme", json.Number("7")}, want: "acme/7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, key, err := joinKey(tc.cols, tc.vals, tc.vals, keyText)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Len(t, key, len(tc.cols))
		})
	}
}

func TestKeyOrderFollowsMessageKey(t *testing.T) {
	t.Parallel()
	value := []byte(`{"op":"c","after":{"a":"1","z":"2"},"source":{"connector":"postgresql","schema":"s","table":"t","lsn":5}}`)
	d := NewDecoder(DecoderConfig{})
	for _, tc := range []struct{ key, want string }{
		{key: `{"z":"2","a":"1"}`, want: "2/1"},
		{key: `{"a":"1","z":"2"}`, want: "1/2"},
		{key: `{"schema":{"type":"struct","fields":[{"field":"z","type":"string"},{"field":"a","type":"string"}]},"payload":{"z":"2","a":"1"}}`, want: "2/1"},
	} {
		ch, err := d.Decode(Record{Raw: Raw{Topic: "x.s.t", Key: []byte(tc.key), Value: value}})
		require.NoError(t, err)
		require.Equal(t, tc.want, ch.DocKey, tc.key)
	}
}

func TestDecimal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		b64   string
		scale int
		want  string
	}{
		{b64: "D54=", scale: 2, want: "39.98"},
		{b64: "C7c=", scale: 2, want: "29.99"},
		{b64: "/2o=", scale: 2, want: "-1.50"},
		{b64: "BQ==", scale: 3, want: "0.005"},
		{b64: "+w==", scale: 3, want: "-0.005"},
		{b64: "AeJA", scale: 0, want: "123456"},
		{b64: "AA==", scale: 2, want: "0.00"},
	}
	for _, tc := range cases {
		got, err := unscaledToNumber(tc.b64, tc.scale)
		require.NoError(t, err)
		require.Equal(t, json.Number(tc.want), got, tc.b64)
	}
	_, err := unscaledToNumber("", 2)
	require.Error(t, err)
	_, err = unscaledToNumber("@@", 2)
	require.Error(t, err)
}

func TestLogicalTimes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		v    any
		want any
		err  bool
	}{
		{name: ltDate, v: json.Number("-1"), want: "1969-12-31"},
		{name: ltTimestamp, v: json.Number("-1"), want: "1969-12-31T23:59:59.999Z"},
		{name: ltMicroTimestamp, v: json.Number("1548936781000001"), want: "2019-01-31T12:13:01.000001Z"},
		{name: ltTime, v: json.Number("86400000"), want: "24:00:00.000000"},
		{name: ltNanoTime, v: json.Number("1"), want: "00:00:00.000000"},
		{name: ltTime, v: json.Number("-1"), err: true},
		{name: ltTime, v: json.Number("9223372036854775807"), err: true},
		{name: ltDate, v: json.Number("999999999999"), err: true},
		{name: ltDate, v: "x", err: true},
		{name: ltMicroTimestamp, v: json.Number("1.5"), err: true},
		{name: ltJSON, v: "[1,{\"a\":null}]", want: []any{json.Number("1"), map[string]any{"a": nil}}},
	}
	for _, tc := range cases {
		got, err := convertValue(tc.v, map[string]any{"name": tc.name}, 0)
		if tc.err {
			require.Error(t, err, "%s %v", tc.name, tc.v)
			continue
		}
		require.NoError(t, err, "%s %v", tc.name, tc.v)
		require.Equal(t, tc.want, got, "%s %v", tc.name, tc.v)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	skip := error(&SkipError{Reason: SkipHeartbeat})
	require.ErrorIs(t, skip, ErrSkip)
	require.Equal(t, "skip heartbeat: not a row change", skip.Error())

	cause := errors.New("boom")
	de := error(&DecodeError{Coord: Coord{Topic: "t", Partition: 2, Offset: 9}, Reason: reasonUnknownOp, Err: cause})
	require.Equal(t, "decode t/2@9: unknown op: boom", de.Error())
	require.ErrorIs(t, de, cause)
	require.NotErrorIs(t, de, ErrSkip)
	var p interface{ Permanent() bool }
	require.ErrorAs(t, de, &p)
	require.True(t, p.Permanent())
	require.Equal(t, "decode t/2@9: no version: source has no lsn, binlog position, commit_lsn, scn, ord or ts_ms",
		(&DecodeError{Coord: Coord{Topic: "t", Partition: 2, Offset: 9}, Reason: reasonNoVersion}).Error())
}

func TestDecoderConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DecoderConfig{}.Validate())
	require.NoError(t, DecoderConfig{Tables: []TableConfig{{Match: "public.*", ID: []string{"id"}}, {Match: "*"}}}.Validate())
	err := DecoderConfig{Tables: []TableConfig{{Match: ""}, {Match: "a[", ID: []string{""}}}}.Validate()
	require.ErrorContains(t, err, "tables[0].match: must not be empty")
	require.ErrorContains(t, err, "tables[1].match")
	require.ErrorContains(t, err, "tables[1].id[0]")
}

func TestTableMatch(t *testing.T) {
	t.Parallel()
	d := NewDecoder(DecoderConfig{Tables: []TableConfig{
		{Match: "*", ID: []string{"any"}},
		{Match: "public.*", ID: []string{"pub"}},
		{Match: "public.articles", ID: []string{"exact"}},
		{Match: "a[", ID: []string{"bad"}},
	}})
	require.Equal(t, []string{"exact"}, d.idColumns("public.articles"))
	require.Equal(t, []string{"any"}, d.idColumns("public.pages"), "first pattern in order wins")
	require.Equal(t, []string{"any"}, d.idColumns("x.y"))

	d = NewDecoder(DecoderConfig{Tables: []TableConfig{{Match: "public.*", ID: []string{"pub"}}}})
	require.Equal(t, []string{"pub"}, d.idColumns("public.pages"))
	require.Nil(t, d.idColumns("other.pages"))
}

func TestNewDecoderCopiesConfig(t *testing.T) {
	t.Parallel()
	ids := []string{"id"}
	cfg := DecoderConfig{Tables: []TableConfig{{Match: "*", ID: ids}}}
	d := NewDecoder(cfg)
	ids[0] = "changed"
	cfg.Tables[0].Match = "nothing"
	require.Equal(t, []string{"id"}, d.idColumns("s.t"))
}

func TestConvertValueStructural(t *testing.T) {
	t.Parallel()
	date := map[string]any{"type": "int32", "name": ltDate}
	dec := map[string]any{"type": "bytes", "name": ltDecimal, "parameters": map[string]any{"scale": "2"}}
	cases := []struct {
		name   string
		schema map[string]any
		v      any
		want   any
		err    bool
	}{
		{name: "nested struct", schema: map[string]any{"type": "struct", "fields": []any{map[string]any{"field": "d", "type": "int32", "name": ltDate}}},
			v: map[string]any{"d": json.Number("0"), "x": "keep"}, want: map[string]any{"d": "1970-01-01", "x": "keep"}},
		{name: "struct not object", schema: map[string]any{"type": "struct"}, v: "x", err: true},
		{name: "struct field error", schema: map[string]any{"type": "struct", "fields": []any{map[string]any{"field": "d", "type": "int32", "name": ltDate}}},
			v: map[string]any{"d": "bad"}, err: true},
		{name: "array of decimals", schema: map[string]any{"type": "array", "items": dec}, v: []any{"D54=", nil}, want: []any{json.Number("39.98"), nil}},
		{name: "array element error", schema: map[string]any{"type": "array", "items": dec}, v: []any{"!"}, err: true},
		{name: "array value not array", schema: map[string]any{"type": "array", "items": date}, v: "x", err: true},
		{name: "map value not a map", schema: map[string]any{"type": "map", "values": date}, v: "x", err: true},
		{name: "map as pairs", schema: map[string]any{"type": "map", "values": date}, v: []any{[]any{json.Number("1"), json.Number("2")}}, want: []any{[]any{json.Number("1"), json.Number("2")}}},
		{name: "map of dates", schema: map[string]any{"type": "map", "keys": map[string]any{"type": "string"}, "values": date}, v: map[string]any{"a": json.Number("1")}, want: map[string]any{"a": "1970-01-02"}},
		{name: "map value error", schema: map[string]any{"type": "map", "values": date}, v: map[string]any{"a": true}, err: true},
		{name: "decimal already a number", schema: dec, v: json.Number("1.5"), want: json.Number("1.5")},
		{name: "decimal wrong type", schema: dec, v: true, err: true},
		{name: "decimal missing scale", schema: map[string]any{"type": "bytes", "name": ltDecimal}, v: "D54=", err: true},
		{name: "variable decimal", schema: map[string]any{"name": ltVariableDecimal}, v: map[string]any{"scale": json.Number("2"), "value": "D54="}, want: json.Number("39.98")},
		{name: "variable decimal number", schema: map[string]any{"name": ltVariableDecimal}, v: json.Number("2.5"), want: json.Number("2.5")},
		{name: "variable decimal bad scale", schema: map[string]any{"name": ltVariableDecimal}, v: map[string]any{"scale": "x", "value": "D54="}, err: true},
		{name: "variable decimal bad value", schema: map[string]any{"name": ltVariableDecimal}, v: map[string]any{"scale": json.Number("2"), "value": json.Number("1")}, err: true},
		{name: "variable decimal wrong type", schema: map[string]any{"name": ltVariableDecimal}, v: "x", err: true},
		{name: "json already structured", schema: map[string]any{"name": ltJSON}, v: map[string]any{"a": "b"}, want: map[string]any{"a": "b"}},
		{name: "null stays null", schema: date, v: nil, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := convertValue(tc.v, tc.schema, 0)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMongoExtendedJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want any
	}{
		{name: "oid", in: `{"$oid":"596e275826f08b2730779e1f"}`, want: "596e275826f08b2730779e1f"},
		{name: "long", in: `{"$numberLong":"9007199254740993"}`, want: json.Number("9007199254740993")},
		{name: "int as number", in: `{"$numberInt":7}`, want: json.Number("7")},
		{name: "double infinity stays string", in: `{"$numberDouble":"Infinity"}`, want: "Infinity"},
		{name: "decimal", in: `{"$numberDecimal":"19.99"}`, want: json.Number("19.99")},
		{name: "date canonical", in: `{"$date":{"$numberLong":"-1"}}`, want: "1969-12-31T23:59:59.999Z"},
		{name: "date relaxed", in: `{"$date":"2019-01-31T13:13:01+01:00"}`, want: "2019-01-31T12:13:01Z"},
		{name: "date legacy ms", in: `{"$date":1548936781000}`, want: "2019-01-31T12:13:01Z"},
		{name: "date string ms", in: `{"$date":"1548936781000"}`, want: "2019-01-31T12:13:01Z"},
		{name: "date garbage kept", in: `{"$date":"soon"}`, want: map[string]any{"$date": "soon"}},
		{name: "binary kept", in: `{"$binary":"AA==","$type":"00"}`, want: map[string]any{"$binary": "AA==", "$type": "00"}},
		{name: "nested", in: `{"a":[{"$oid":"x"},{"b":{"$numberInt":"1"}}]}`, want: map[string]any{"a": []any{"x", map[string]any{"b": json.Number("1")}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := parseJSON([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, plainExt(v, 0))
		})
	}

	doc, _, err := mongoDoc(`{"$oid":"x"}`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"$oid": "x"}, doc, "a document is never collapsed into a scalar")
	_, _, err = mongoDoc(`[1]`)
	require.Error(t, err)
	_, _, err = mongoDoc(json.Number("1"))
	require.Error(t, err)

	plain := func(v any) any { p, _ := mongoKeyValue(v); return p }
	require.Equal(t, "abc", plain("abc"), "a string that is not JSON is a plain id")
	require.Equal(t, "hello", plain(`"hello"`))
	require.Equal(t, json.Number("12.34"), plain("12.34"))
}

// TestConvertValueSchemaTypes: a value whose JSON type contradicts its
// Connect schema type is an error, as in Kafka Connect's JsonConverter.
func TestConvertValueSchemaTypes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ  string
		v    any
		good bool
	}{
		{"string", "x", true},
		{"string", json.Number("1234"), false},
		{"string", true, false},
		{"string", map[string]any{}, false},
		{"boolean", true, true},
		{"boolean", "true", false},
		{"boolean", json.Number("1"), false},
		{"int8", json.Number("127"), true},
		{"int8", json.Number("128"), false},
		{"int16", json.Number("-32768"), true},
		{"int32", json.Number("2147483648"), false},
		{"int32", json.Number("1.5"), false},
		{"int32", "7", false},
		{"int64", json.Number("9223372036854775807"), true},
		{"int64", json.Number("9223372036854775808"), false},
		{"float32", json.Number("1.5"), true},
		{"float64", json.Number("1e300"), true},
		{"float64", "NaN", true},
		{"float64", "-Infinity", true},
		{"float64", "1.5", false},
		{"float64", false, false},
		{"bytes", "AAEC", true},
		{"bytes", "not base64!", false},
		{"bytes", json.Number("1"), false},
		{"struct", "x", false},
		{"array", map[string]any{}, false},
		{"unknown-type", json.Number("1"), true}, // nothing to check against
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%v", tc.typ, tc.v), func(t *testing.T) {
			t.Parallel()
			_, err := convertValue(tc.v, map[string]any{"type": tc.typ}, 0)
			if tc.good {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
