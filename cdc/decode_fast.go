package cdc

import (
	"encoding/json"
	"unicode/utf16"
	"unicode/utf8"
)

// fastParse decodes b into what checkInput and encoding/json with
// UseNumber give together (map[string]any, []any, string, json.Number,
// bool, nil; a repeated key keeps its last value), in one pass: the two
// scanned a message three times and copied its strings, most of a large
// document's decoding. ok is false for anything it does not accept, valid
// or not: everything checkInput refuses (invalid UTF-8, a lone surrogate
// escape, nesting deeper than maxDepth) and more. parseJSON then runs
// checkInput and encoding/json, so errors, and any input this parser
// refuses, read exactly as they always did. TestFastParseMatchesEncodingJSON
// compares the two.
func fastParse(b []byte) (v any, ok bool) {
	p := fastParser{b: b}
	p.space()
	v, ok = p.value()
	if !ok {
		return nil, false
	}
	p.space()
	return v, p.i == len(p.b)
}

type fastParser struct {
	b     []byte
	i     int
	depth int // arrays and objects open
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value() (any, bool) {
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, ok := p.str()
		return s, ok
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, false
}

func (p *fastParser) literal(word string) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

func (p *fastParser) object() (any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.i++ // '{'
	m := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, true
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, false
		}
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.space()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		m[k] = v
		p.space()
		if p.i >= len(p.b) {
			return nil, false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.space()
		case '}':
			p.i++
			return m, true
		default:
			return nil, false
		}
	}
}

func (p *fastParser) array() (any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.i++ // '['
	a := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, true
	}
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		a = append(a, v)
		p.space()
		if p.i >= len(p.b) {
			return nil, false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.space()
		case ']':
			p.i++
			return a, true
		default:
			return nil, false
		}
	}
}

// str reads the string whose opening quote is at p.i. Without escapes it
// is one copy of the bytes, which must be UTF-8.
func (p *fastParser) str() (string, bool) {
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			if !utf8.Valid(p.b[start:j]) {
				return "", false
			}
			p.i = j + 1
			return string(p.b[start:j]), true
		case c == '\\':
			return p.escaped(start, j)
		case c < ' ':
			return "", false
		}
	}
	return "", false
}

// escaped reads the rest of a string from its first backslash at j.
func (p *fastParser) escaped(start, j int) (string, bool) {
	if !utf8.Valid(p.b[start:j]) {
		return "", false
	}
	out := make([]byte, 0, j-start+16)
	out = append(out, p.b[start:j]...)
	for j < len(p.b) {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(out), true
		case c < ' ':
			return "", false
		case c != '\\':
			// The run up to the next quote, backslash or control
			// character, in one copy.
			k := j + 1
			for k < len(p.b) && p.b[k] >= ' ' && p.b[k] != '"' && p.b[k] != '\\' {
				k++
			}
			if !utf8.Valid(p.b[j:k]) {
				return "", false
			}
			out = append(out, p.b[j:k]...)
			j = k
			continue
		}
		if j+1 >= len(p.b) {
			return "", false
		}
		switch e := p.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(p.b, j+2)
			if !ok {
				return "", false
			}
			j += 6
			if utf16.IsSurrogate(r) {
				// checkInput let only whole pairs through; anything
				// else is left to encoding/json.
				if j+1 >= len(p.b) || p.b[j] != '\\' || p.b[j+1] != 'u' {
					return "", false
				}
				lo, ok := hex4(p.b, j+2)
				if !ok {
					return "", false
				}
				r = utf16.DecodeRune(r, lo)
				if r == utf8.RuneError {
					return "", false
				}
				j += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

// number reads a JSON number (RFC 8259's grammar) as json.Number.
func (p *fastParser) number() (any, bool) {
	b, i := p.b, p.i
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	p.i = i
	return json.Number(b[start:i]), true
}
