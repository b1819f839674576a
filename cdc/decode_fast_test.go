package cdc

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkFastParse fails if fastParse accepts b and gives anything other than
// encoding/json's value, or accepts what checkInput or encoding/json
// refuses.
func checkFastParse(t *testing.T, b []byte) {
	t.Helper()
	fast, ok := fastParse(b)
	if !ok {
		return // parseJSON falls back to checkInput and encoding/json: the same by construction
	}
	slow, err := slowParse(b)
	require.NoError(t, err, "fastParse accepted what checkInput or encoding/json refuses: %q", b)
	require.Equal(t, slow, fast, "input %q", b)
}

func TestFastParseMatchesEncodingJSON(t *testing.T) {
	seeds := []string{
		`{"a":1,"b":[1,2,{"c":null}],"d":"x\"y\\z\/\b\f\n\r\tq","e":true,"f":false}`,
		`{"a":1,"a":2}`, `{}`, `[]`, `[[]]`, `{"":""}`, ` { "a" : [ 1 , 2 ] } `,
		`"\u00e9\u4e2d\ud83d\ude00"`, `"\ud83d\ude00x"`, `"\u0000"`, `"é中😀"`,
		`0`, `-0`, `-0.5e+10`, `1E5`, `1e-5`, `123456789012345678901234567890`, `1.`, `.5`, `01`, `-`, `1e`, `+1`, `1.5.2`,
		`true`, `false`, `null`, `tru`, `nul`, `truex`, `nullnull`,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{,}`, `[,]`, `{"a" 1}`, `{1:2}`, `["a" "b"]`,
		`"a`, `"a\`, `"\x"`, `"\'"`, `"\u12"`, `"\u12G4"`, "\"a\tb\"", "\"a\nb\"", "\"\x7f\"",
		`{"a":1}{"b":2}`, `{"a":1} x`, `1 2`, "{\"a\":1}\n", "\t[1]\r\n",
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `"\udc00\ud800"`, `"a\\ud800"`,
		"\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", "{\"\xff\":1}", "[\"\\n\xff\"]", "\xef\xbb\xbf{}",
		strings.Repeat("[", 128) + strings.Repeat("]", 128), strings.Repeat("[", 129) + strings.Repeat("]", 129),
		strings.Repeat(`{"a":`, 129) + "1" + strings.Repeat("}", 129), strings.Repeat(`[{"a":`, 64) + "1" + strings.Repeat("}]", 64),
		strings.Repeat(`[{"a":`, 65) + "1" + strings.Repeat("}]", 65),
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		seeds = append(seeds, string(b))
	}
	inputs := append([]string(nil), seeds...)
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte(`{}[]",:\ -+.eE0123456789abcdefnrtuxyzD` + "\t\n\r\x01é\xff\xc3")
	for range 20000 {
		s := []byte(seeds[rng.IntN(len(seeds))])
		for range 1 + rng.IntN(3) {
			switch i := rng.IntN(len(s) + 1); rng.IntN(3) {
			case 0: // insert
				s = append(s[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, s[i:]...)...)
			case 1: // delete
				if i < len(s) {
					s = append(s[:i], s[i+1:]...)
				}
			case 2: // cut and splice with another seed
				o := seeds[rng.IntN(len(seeds))]
				s = append(s[:i:i], o[rng.IntN(len(o)+1):]...)
			}
		}
		inputs = append(inputs, string(s))
	}
	accepted := 0
	for _, in := range inputs {
		checkFastParse(t, []byte(in))
		if _, ok := fastParse([]byte(in)); ok && checkInput([]byte(in)) == nil {
			accepted++
		}
	}
	// The comparison means something only if most valid inputs took the
	// fast path: every seed that encoding/json accepts must.
	for _, in := range seeds {
		if _, err := slowParse([]byte(in)); err == nil {
			_, ok := fastParse([]byte(in))
			require.True(t, ok, "fastParse refused valid JSON %q", in)
		}
	}
	require.Greater(t, accepted, 1000)
}

func FuzzFastParse(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x\u00e9",null,true]}`))
	f.Fuzz(func(t *testing.T, b []byte) { checkFastParse(t, b) })
}
