package cdc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Regression tests of decoding change events (no silent loss, no silent
// corruption), with inputs written by hand from Debezium's documentation
// in testdata/strict-*.json and testdata/mongo-{id,tx}-*.json.

func decodeFile(t *testing.T, d *Decoder, file string) (Change, error) {
	t.Helper()
	v, err := os.ReadFile(filepath.Join("testdata", file+".json"))
	require.NoError(t, err)
	k, err := os.ReadFile(filepath.Join("testdata", file+".key.json"))
	require.NoError(t, err)
	return d.Decode(Record{Raw: Raw{Topic: "fulfillment.inventory.customers", Key: k, Value: v, Offset: 9}})
}

// TestDecodeStrictInput: invalid UTF-8, lone surrogate escapes and values
// that contradict their schema are decode errors, never U+FFFD or a
// silently retyped value in the index.
func TestDecodeStrictInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file, wantReason, wantDetail string
	}{
		{file: "strict-invalid-utf8", wantReason: reasonBadText, wantDetail: "invalid UTF-8"},
		{file: "strict-lone-surrogate", wantReason: reasonBadText, wantDetail: "lone UTF-16 surrogate"},
		{file: "strict-schema-string-is-number", wantReason: reasonBadValue, wantDetail: `column "first_name": string: want a string, got 1234`},
		{file: "strict-schema-int-is-string", wantReason: reasonBadValue, wantDetail: `column "id": int32: want a int32, got "1"`},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			_, err := decodeFile(t, NewDecoder(DecoderConfig{}), tc.file)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.wantReason, de.Reason)
			require.Contains(t, err.Error(), tc.wantDetail)
			require.True(t, de.Permanent())
		})
	}

	// A valid pair is a character; an escaped backslash before "ud800" is
	// text, not an escape.
	ch, err := decodeFile(t, NewDecoder(DecoderConfig{}), "strict-surrogate-pair")
	require.NoError(t, err)
	require.Equal(t, "Anne \U0001F600 \\ud800", ch.After["first_name"])
}

func TestCheckInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want error
	}{
		{name: "plain", in: `{"a":"b"}`},
		{name: "bmp escape", in: `"\u00e9\u4e2d"`},
		{name: "pair", in: `"\uD83D\uDE00"`},
		{name: "lone high", in: `"\ud800"`, want: errLoneSurrogate},
		{name: "lone high at end of input", in: `"\ud800`, want: errLoneSurrogate},
		{name: "lone low", in: `"\udc00"`, want: errLoneSurrogate},
		{name: "high then bmp escape", in: `"\ud800\u0041"`, want: errLoneSurrogate},
		{name: "high then text", in: `"\ud800abcdef"`, want: errLoneSurrogate},
		{name: "two highs", in: `"\ud800\ud800"`, want: errLoneSurrogate},
		{name: "in a key", in: `{"\udfff":1}`, want: errLoneSurrogate},
		{name: "escaped backslash", in: `"\\ud800"`},
		{name: "quote escapes", in: `"\"\ud800\""`, want: errLoneSurrogate},
		{name: "invalid utf-8", in: "\"a\xffb\"", want: errBadUTF8},
		{name: "overlong encoding", in: "\"\xc0\xaf\"", want: errBadUTF8},
		{name: "utf-8 surrogate bytes", in: "\"\xed\xa0\x80\"", want: errBadUTF8},
		{name: "invalid utf-8 outside strings", in: "{\xff}", want: errBadUTF8},
		{name: "brackets inside strings do not nest", in: `"[[[[{{{{"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkInput([]byte(tc.in))
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.True(t, errors.Is(err, tc.want), "got %v", err)
		})
	}
}

// TestDecodeStrictNestedJSON: text inside a string (a MongoDB document, an
// io.debezium.data.Json column, a message key) is checked the same way.
func TestDecodeStrictNestedJSON(t *testing.T) {
	t.Parallel()
	d := NewDecoder(DecoderConfig{})
	mongo := `{"op":"c","after":"{\"_id\": 1, \"t\": \"\\ud800\"}","source":{"connector":"mongodb","db":"d","collection":"c","ts_ms":1,"ord":1}}`
	_, err := d.Decode(Record{Raw: Raw{Topic: "t", Key: []byte(`{"id":"1"}`), Value: []byte(mongo)}})
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, reasonBadRow, de.Reason)

	jsonCol := `{"schema":{"type":"struct","name":"x.Envelope","fields":[{"field":"after","type":"struct","fields":[{"field":"j","type":"string","name":"io.debezium.data.Json"}]}]},` +
		`"payload":{"op":"c","after":{"id":1,"j":"{\"a\":\"\\udc00\"}"},"source":{"lsn":5,"schema":"s","table":"t"}}}`
	_, err = d.Decode(Record{Raw: Raw{Topic: "t", Key: []byte(`{"id":1}`), Value: []byte(jsonCol)}})
	require.ErrorAs(t, err, &de)
	require.Equal(t, reasonBadValue, de.Reason)

	_, err = d.Decode(Record{Raw: Raw{Topic: "t", Key: []byte("{\"id\":\"a\xffb\"}"), Value: []byte(`{"op":"c","after":{"id":1},"source":{"lsn":5,"schema":"s","table":"t"}}`)}})
	require.ErrorAs(t, err, &de)
	require.Equal(t, reasonBadKey, de.Reason)
}

// TestMongoIDTyping: MongoDB _ids of different types are different
// documents, whether the id comes from the message key or from the
// document; the common forms keep the text they always had.
func TestMongoIDTyping(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"mongo-id-int":            "1234",
		"mongo-id-string":         `"1234"`,
		"mongo-id-oid":            "596e275826f08b2730779e1f",
		"mongo-id-oid-hex-string": `"596e275826f08b2730779e1f"`,
		"mongo-id-plain-string":   "anne@example.com",
	}
	byKey := NewDecoder(DecoderConfig{})
	byID := NewDecoder(DecoderConfig{Tables: []TableConfig{{Match: "*", ID: []string{"_id"}}}})
	seen := map[string]string{}
	for file, key := range want {
		for _, d := range []*Decoder{byKey, byID} {
			ch, err := decodeFile(t, d, file)
			require.NoError(t, err, file)
			require.Equal(t, key, ch.DocKey, file)
			require.Equal(t, "inventory.customers", ch.Table)
		}
		if other, dup := seen[key]; dup {
			t.Fatalf("%s and %s share doc key %q", file, other, key)
		}
		seen[key] = file
	}
	// Deleting by the key alone reaches the same document as the create.
	del := `{"op":"d","before":null,"after":null,"source":{"connector":"mongodb","db":"inventory","collection":"customers","ts_ms":1558965509000,"ord":2}}`
	for file, k := range map[string]string{`{"id":"\"1234\""}`: `"1234"`, `{"id":"1234"}`: "1234", `{"id":"{\"$oid\": \"596e275826f08b2730779e1f\"}"}`: "596e275826f08b2730779e1f"} {
		ch, err := byID.Decode(Record{Raw: Raw{Topic: "t", Key: []byte(file), Value: []byte(del)}})
		require.NoError(t, err)
		require.Equal(t, k, ch.DocKey)
	}
}

func TestMongoKeyText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string // extended JSON as sent
		want string
	}{
		{name: "oid", in: `{"$oid":"596e275826f08b2730779e1f"}`, want: "596e275826f08b2730779e1f"},
		{name: "int", in: `1234`, want: "1234"},
		{name: "long wrapper", in: `{"$numberLong":"1234"}`, want: "1234"},
		{name: "double one is int one", in: `{"$numberDouble":"1.0"}`, want: "1"},
		{name: "string digits", in: `"1234"`, want: `"1234"`},
		{name: "string hex", in: `"596e275826f08b2730779e1f"`, want: `"596e275826f08b2730779e1f"`},
		{name: "string true", in: `"true"`, want: `"true"`},
		{name: "bool", in: `true`, want: "true"},
		{name: "string starting with brace", in: `"{x"`, want: `"{x"`},
		{name: "string with quote", in: `"\"a\\b"`, want: `"\"a\\b"`},
		{name: "plain string", in: `"anne"`, want: "anne"},
		{name: "string 0042 is no number", in: `"0042"`, want: "0042"},
		{name: "composite with oid", in: `{"b":{"$oid":"596e275826f08b2730779e1f"},"a":{"$numberInt":"1"}}`, want: `{"a":1,"b":{"$oid":"596e275826f08b2730779e1f"}}`},
		{name: "composite with string", in: `{"b":"596e275826f08b2730779e1f","a":1}`, want: `{"a":1,"b":"596e275826f08b2730779e1f"}`},
		{name: "date", in: `{"$date":{"$numberLong":"1"}}`, want: `{"$date":1}`},
		{name: "nan stays wrapped", in: `{"$numberDouble":"NaN"}`, want: `{"$numberDouble":"NaN"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := parseJSON([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, mongoKeyText(v))
		})
	}
}

// TestMongoTransactionOrder: the second change to a document inside one
// transaction (same cluster time and ord) is newer, not a duplicate.
func TestMongoTransactionOrder(t *testing.T) {
	t.Parallel()
	d := NewDecoder(DecoderConfig{})
	first, err := decodeFile(t, d, "mongo-tx-update-1")
	require.NoError(t, err)
	second, err := decodeFile(t, d, "mongo-tx-update-2")
	require.NoError(t, err)
	require.Equal(t, first.DocKey, second.DocKey)
	require.Equal(t, -1, first.Version.Compare(second.Version))
	require.Equal(t, "Anne Marie", second.After["first_name"])
}

// TestTableNameInjective: schema "sales" + table "eu.orders" and schema
// "sales.eu" + table "orders" are different tables.
func TestTableNameInjective(t *testing.T) {
	t.Parallel()
	cases := []struct{ ns, table, want string }{
		{"public", "articles", "public.articles"},
		{"sales", "eu.orders", "sales.eu.orders"},
		{"sales.eu", "orders", "sales%2Eeu.orders"},
		{"inventory", "orders.archive", "inventory.orders.archive"}, // MongoDB dotted collection
		{"a/b", "c", "a%2Fb.c"},
		{"a", "b/c", "a.b%2Fc"},
		{"50%", "off", "50%25.off"},
		{"", "MY_TABLE", "MY_TABLE"},
		{"", "a.b", "a%2Eb"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		got := TableName(tc.ns, tc.table)
		require.Equal(t, tc.want, got, "%q + %q", tc.ns, tc.table)
		require.False(t, seen[got], "collision on %q", got)
		seen[got] = true
	}

	// Through the decoder, from the source block.
	d := NewDecoder(DecoderConfig{})
	ev := func(schema, table string) string {
		return `{"op":"c","after":{"id":7},"source":{"connector":"postgresql","schema":"` + schema + `","table":"` + table + `","lsn":5,"ts_ms":1}}`
	}
	a, err := d.Decode(Record{Raw: Raw{Topic: "srv.x.y", Key: []byte(`{"id":7}`), Value: []byte(ev("sales", "eu.orders"))}})
	require.NoError(t, err)
	b, err := d.Decode(Record{Raw: Raw{Topic: "srv.x.y", Key: []byte(`{"id":7}`), Value: []byte(ev("sales.eu", "orders"))}})
	require.NoError(t, err)
	require.NotEqual(t, a.Table, b.Table)
	require.Equal(t, "sales.eu.orders", a.Table)
	require.Equal(t, "sales%2Eeu.orders", b.Table)
}
