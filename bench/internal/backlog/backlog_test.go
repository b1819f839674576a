package backlog

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

func TestEventCreatesThenUpdatesTheMiddleParagraph(t *testing.T) {
	const docs = 3
	decode := func(i int) (op string, body []string) {
		var v struct {
			Op    string `json:"op"`
			After struct {
				Body string `json:"body"`
			} `json:"after"`
		}
		require.NoError(t, json.Unmarshal(Event(i, docs).Value, &v))
		return v.Op, splitParas(v.After.Body)
	}
	op, first := decode(1)
	require.Equal(t, "c", op)
	require.Len(t, first, 3)
	op, again := decode(1 + docs)
	require.Equal(t, "u", op)
	require.Equal(t, first[0], again[0])
	require.NotEqual(t, first[1], again[1], "an update replaces the middle paragraph")
	require.Equal(t, first[2], again[2])
	require.Equal(t, `{"id":1}`, string(Event(1+docs, docs).Key))
	require.NotEqual(t, Para(1), Para(2))
	require.Equal(t, Para(7), Para(7), "a paragraph is determined by its seed")
}

func splitParas(s string) []string {
	var out []string
	start := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\n' && s[i+1] == '\n' {
			out = append(out, s[start:i])
			start = i + 2
		}
	}
	return append(out, s[start:])
}

// The Avro backlog is the same changes as the JSON one: each event decodes
// to the same cdc.Change, so the two drains compare like for like.
func TestAvroEventsDecodeLikeJSON(t *testing.T) {
	reg := srtest.New(t, srtest.Options{})
	a, err := NewAvro("dbserver1.public.articles", func(s, typ, text string) int { return reg.Register(s, typ, text) })
	require.NoError(t, err)
	client, err := registry.New(registry.Config{URL: reg.URL()})
	require.NoError(t, err)
	jsonDec := cdc.NewDecoder(cdc.DecoderConfig{})
	avroDec := cdc.NewDecoder(cdc.DecoderConfig{Schemas: client})
	for _, i := range []int{0, 1, 99, 100, 250} {
		j := Event(i, 100)
		r, err := a.Event(i, 100)
		require.NoError(t, err)
		want, err := jsonDec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "t", Key: j.Key, Value: j.Value}})
		require.NoError(t, err)
		got, err := avroDec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "t", Key: r.Key, Value: r.Value}})
		require.NoError(t, err)
		require.Equal(t, want, got, "event %d", i)
	}
}
