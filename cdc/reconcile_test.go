package cdc_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
)

// TestSplitDocKeyInvertsTheDecodersKey: the parts SplitDocKey returns are
// the id columns' values as text, whatever separators or escapes the
// values hold.
func TestSplitDocKeyInvertsTheDecodersKey(t *testing.T) {
	dec := cdc.NewDecoder(cdc.DecoderConfig{})
	for _, tc := range []struct {
		key  map[string]any
		cols []string
		want []string
	}{
		{map[string]any{"id": 42}, []string{"id"}, []string{"42"}},
		{map[string]any{"id": "a/b%2F"}, []string{"id"}, []string{"a/b%2F"}},
		{map[string]any{"tenant": "a/b%2F", "n": 3}, []string{"tenant", "n"}, []string{"a/b%2F", "3"}},
		{map[string]any{"tenant": "%25/", "n": -1, "k": "x"}, []string{"tenant", "n", "k"}, []string{"%25/", "-1", "x"}},
	} {
		after := map[string]any{"body": "x"}
		for k, v := range tc.key {
			after[k] = v
		}
		// Key fields in id-column order, as Debezium writes a primary key.
		var keyJSON []byte
		keyJSON = append(keyJSON, '{')
		for i, c := range tc.cols {
			if i > 0 {
				keyJSON = append(keyJSON, ',')
			}
			name, _ := json.Marshal(c)
			val, _ := json.Marshal(tc.key[c])
			keyJSON = append(append(append(keyJSON, name...), ':'), val...)
		}
		keyJSON = append(keyJSON, '}')
		value, err := json.Marshal(map[string]any{"op": "c", "after": after,
			"source": map[string]any{"connector": "postgresql", "schema": "public", "table": "t", "lsn": 1, "ts_ms": 1}})
		require.NoError(t, err)
		ch, err := dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "db.public.t", Key: keyJSON, Value: value}})
		require.NoError(t, err)
		got, ok := cdc.SplitDocKey(ch.DocKey, len(tc.cols))
		require.True(t, ok, ch.DocKey)
		require.Equal(t, tc.want, got, ch.DocKey)
	}
	_, ok := cdc.SplitDocKey("a/b", 3)
	require.False(t, ok, "a key of another arity")
}
