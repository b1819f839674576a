package cdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of any JSON the decoder parses (the message and
// every JSON document embedded in a string). Debezium envelopes add four
// levels to a row; 128 leaves room for deep jsonb columns while keeping the
// recursive walks over decoded values cheap on hostile input.
const maxDepth = 128

var (
	errTooDeep  = errors.New("nesting deeper than 128 levels")
	errTrailing = errors.New("trailing data after the JSON value")
	// JSON text is UTF-8 (RFC 8259 §8.1), and a \u escape of a lone
	// surrogate names no character. encoding/json quietly turns both into
	// U+FFFD, which would reach the index (and the dead letter) as text the
	// source never held; Kafka Connect's JsonConverter rejects both.
	errBadUTF8       = errors.New("invalid UTF-8")
	errLoneSurrogate = errors.New("lone UTF-16 surrogate escape")
)

// checkInput scans b without allocating and fails if it is not valid UTF-8,
// if a string holds a \u escape of a lone surrogate, or if arrays/objects
// nest deeper than maxDepth. The JSON parser that runs next does the rest
// of the validation.
func checkInput(b []byte) error {
	if !utf8.Valid(b) {
		return errBadUTF8
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, err := scanString(b, i+1)
			if err != nil {
				return err
			}
			i = end
		case '{', '[':
			depth++
			if depth > maxDepth {
				return errTooDeep
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// scanString returns the index of the quote that closes the string whose
// first byte is b[i], or errLoneSurrogate for a high surrogate escape
// (\uD800–\uDBFF) not followed by an escaped low one (\uDC00–\uDFFF), or a
// low one on its own.
func scanString(b []byte, i int) (int, error) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, nil
		case '\\':
			if i+1 >= len(b) || b[i+1] != 'u' {
				i++ // the escaped character, whatever it is
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok || !utf16.IsSurrogate(r) {
				i++ // past the 'u': the hex digits are plain bytes
				continue
			}
			if r < 0xDC00 && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // the last hex digit of the pair
					continue
				}
			}
			return 0, errLoneSurrogate
		}
	}
	return len(b), nil // unterminated: the parser says so
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// parseJSON decodes one JSON value with numbers kept as json.Number, so ids
// and decimals never pass through float64.
func parseJSON(b []byte) (any, error) {
	if v, ok := fastParse(b); ok {
		return v, nil // checkInput would pass: see fastParse
	}
	return slowParse(b)
}

// slowParse is parseJSON without fastParse: the input checks, then
// encoding/json, which also gives the error messages of what fastParse
// refuses.
func slowParse(b []byte) (any, error) {
	if err := checkInput(b); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return v, nil
}

// isNullJSON reports whether b is empty, whitespace or the JSON literal null:
// all of them are tombstones.
func isNullJSON(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) == 0 || string(t) == "null"
}

// objectKeyOrder returns the top-level keys of the JSON object b in the order
// they appear (first occurrence wins), which a map loses. Record keys list
// primary-key columns in key order, and DocKey joins them in that order.
func objectKeyOrder(b []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var keys []string
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := t.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// describe names a decoded JSON value's type for error messages.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case json.Number:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// asUint reads a non-negative integer that Debezium may write as a JSON
// number or, in payload-only and documented examples, as a string ("ts_ms":
// "123"). ok is false when the field is absent or null.
func asUint(v any) (n uint64, ok bool, err error) {
	var s string
	switch v := v.(type) {
	case nil:
		return 0, false, nil
	case json.Number:
		s = string(v)
	case string:
		s = strings.TrimSpace(v)
		if s == "" {
			return 0, false, nil
		}
	default:
		return 0, false, fmt.Errorf("want an unsigned integer, got %s", describe(v))
	}
	n, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("want an unsigned integer, got %q", s)
	}
	return n, true, nil
}

// asInt is asUint for signed values (epoch days and times before 1970).
func asInt(v any) (int64, error) {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = string(v)
	case string:
		s = strings.TrimSpace(v)
	default:
		return 0, fmt.Errorf("want an integer, got %s", describe(v))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %q", s)
	}
	return n, nil
}

// asText renders a scalar source field (txId, gtid, ids) as text.
func asText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, v != ""
	case json.Number:
		return string(v), true
	}
	return "", false
}

// canonicalNumber renders n so that equal integers give equal text whatever
// their JSON spelling ("1004", "1004.0", "1.004e3" → "1004"); other numbers
// keep their decimal text, which is already exact.
func canonicalNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	// Bound the exponent before big.Rat expands it: "1e999999999" would
	// allocate a billion-digit integer.
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(s[i+1:]); err != nil || e > 64 || e < -64 {
			return s
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	return s
}
