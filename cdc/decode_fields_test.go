package cdc

import (
	"encoding/json"
	"errors"
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
			got, key, err := joinKey(tc.cols, tc.vals)
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
		ch, err := d.Decode(Message{Topic: "x.s.t", Key: []byte(tc.key), Value: value})
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
