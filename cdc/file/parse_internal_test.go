package file

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// ParseLine's first-key shortcut must never change what a line becomes:
// every line gives the same message with and without it.
func TestParseLineShortcutAgreesWithFullParse(t *testing.T) {
	lines := []string{
		`{"op":"c","after":{"id":1}}`,
		`{"after":{"id":1,"body":"x"},"before":null,"op":"u"}`,
		`{"schema":{},"payload":{"op":"c"}}`,
		`{"payload":{"op":"c"},"schema":{}}`,
		`{"topic":"t","key":{"id":1},"value":{"op":"d"}}`,
		`{"key":{"id":1},"value":null}`,
		`{"topic":"t","partition":2,"offset":9,"key":"{\"id\":1}","payload":"{\"op\":\"u\"}","headers":["traceparent","00-x"]}`,
		`{"id":1,"value":"x","name":"y"}`,
		`{"value":{"op":"c"},"id":1}`,
		`{"\u0074opic":"t","value":{"op":"c"}}`,
		`{"\u006fp":"c","value":{"op":"c"}}`,
		`{"op":`,
		`{"value":`,
		`{"value":{"op":"c"}`,
		`{}`,
		`{ }`,
		` { "value" : {"op":"c"} } `,
		"{\"value\":{\"op\":\"c\"},\"topic\":\"\xff\"}",
		"{\"\xff\":1}",
		"\xef\xbb\xbf{\"value\":{}}",
		`["value"]`,
		`"value"`,
		`null`,
		``,
		`{"topic":"t","value":{"op":"c"},"value":null}`,
		`{"key_base64":"AAE=","payload_base64":"eyJvcCI6ImMifQ==","headers_base64":["h","dg=="]}`,
		`{"Topic":"t","value":{"op":"c"}}`,
		"{\"topic\"\t:\"t\",\"value\":{}}",
		`{"topic":1,"value":{}}`,
	}
	// Random cuts and splices of the lines above, so malformed variants of
	// every shape are compared too.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		a, b := lines[rng.IntN(len(lines))], lines[rng.IntN(len(lines))]
		i, j := rng.IntN(len(a)+1), rng.IntN(len(b)+1)
		lines = append(lines, a[:i]+b[j:])
	}
	for _, l := range lines {
		want := parseWrapped([]byte(l), 3)
		got := ParseLine([]byte(l+"\n"), 3)
		require.Equal(t, want, got, "line %q", l)
	}
	// The shortcut is taken for the values a source writes.
	for _, l := range []string{`{"after":{}}`, `{"schema":{},"payload":{}}`, ` {"before":null}`} {
		require.True(t, bareByFirstKey([]byte(l)), l)
	}
	for _, l := range []string{`{"value":{}}`, `{"\u0061fter":{}}`, `{}`, `x`} {
		require.False(t, bareByFirstKey([]byte(l)), l)
	}
}
