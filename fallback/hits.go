package fallback

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeHits decodes a reply's results field. The front door writes it with
// json.Marshal (encodeHits), so it is nearly always compact JSON whose
// strings need no unescaping; those are read here in one pass, several times
// faster than encoding/json, whose reflection-driven decoding of a few KB of
// chunk text was the largest CPU cost of a cache hit on the client.
// Anything else — an escape, whitespace, null, an unknown or repeated key,
// invalid input — goes to encoding/json, so the result (and every error) is
// exactly what json.Unmarshal gives; FuzzDecodeHits holds the two to that.
func decodeHits(raw string) ([]Hit, error) {
	if hits, ok := decodeHitsFast(raw); ok {
		return hits, nil
	}
	var hits []Hit
	if err := json.Unmarshal([]byte(raw), &hits); err != nil {
		return nil, err
	}
	return hits, nil
}

// decodeHitsFast reads raw if it is a compact array of Hit objects; ok is
// false whenever it is not sure to agree with encoding/json.
func decodeHitsFast(raw string) (hits []Hit, ok bool) {
	p := hitParser{s: raw}
	if !p.byte('[') {
		return nil, false
	}
	hits = []Hit{}
	if p.byte(']') {
		return hits, p.i == len(p.s)
	}
	for {
		h, ok := p.hit()
		if !ok {
			return nil, false
		}
		hits = append(hits, h)
		if p.byte(',') {
			continue
		}
		if p.byte(']') && p.i == len(p.s) {
			return hits, true
		}
		return nil, false
	}
}

type hitParser struct {
	s string
	i int
}

func (p *hitParser) byte(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// hit reads one object with the keys encodeHits writes, in any order, each
// at most once (encoding/json would let a repeat overwrite or merge).
func (p *hitParser) hit() (h Hit, ok bool) {
	if !p.byte('{') {
		return h, false
	}
	var seen uint8
	for first := true; ; first = false {
		if p.byte('}') && first {
			return h, true
		}
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return h, false
		}
		var bit uint8
		switch key {
		case "doc_id":
			bit = 1
			h.DocID, ok = p.str()
		case "table":
			bit = 2
			h.Table, ok = p.str()
		case "key":
			bit = 4
			h.Key, ok = p.str()
		case "position":
			bit = 8
			h.Position, ok = p.int()
		case "text":
			bit = 16
			h.Text, ok = p.str()
		case "score":
			bit = 32
			h.Score, ok = p.float()
		case "provenance":
			bit = 64
			h.Provenance, ok = p.provenance()
		default: // metadata (a map) and anything unexpected
			return h, false
		}
		if !ok || seen&bit != 0 {
			return h, false
		}
		seen |= bit
		if p.byte(',') {
			continue
		}
		return h, p.byte('}')
	}
}

// provenance reads the provenance object as Provenance.MarshalJSON writes
// it, or null: each key at most once, each value a string or null
// (dimensions an integer or null). encoding/json leaves a field it reads
// null at its zero value, and so does this; committed_at is parsed by
// time.Time's own UnmarshalJSON, from the same bytes encoding/json would
// hand it.
func (p *hitParser) provenance() (v Provenance, ok bool) {
	if p.null() {
		return v, true
	}
	if !p.byte('{') {
		return v, false
	}
	var seen uint8
	for first := true; ; first = false {
		if p.byte('}') && first {
			return v, true
		}
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return v, false
		}
		var bit uint8
		var s *string
		switch key {
		case "model":
			bit, s = 1, &v.Model
		case "model_version":
			bit, s = 2, &v.ModelVersion
		case "chunker":
			bit, s = 4, &v.Chunker
		case "source":
			bit, s = 8, &v.Source
		case "source_position":
			bit, s = 16, &v.SourcePosition
		case "trace_id":
			bit, s = 32, &v.TraceID
		case "dimensions":
			bit = 64
			if !p.null() {
				v.Dimensions, ok = p.int()
			}
		case "committed_at":
			bit = 128
			if !p.null() {
				start := p.i
				if _, ok = p.str(); ok {
					ok = v.CommittedAt.UnmarshalJSON([]byte(p.s[start:p.i])) == nil
				}
			}
		default:
			return v, false
		}
		if s != nil && !p.null() {
			*s, ok = p.str()
		}
		if !ok || seen&bit != 0 {
			return v, false
		}
		seen |= bit
		if p.byte(',') {
			continue
		}
		return v, p.byte('}')
	}
}

// null skips a JSON null.
func (p *hitParser) null() bool {
	if strings.HasPrefix(p.s[p.i:], "null") {
		p.i += 4
		return true
	}
	return false
}

// str reads a string without escapes, control characters or invalid UTF-8
// (which encoding/json would reject or replace). The searches go a word or a
// vector at a time: chunk texts are most of a reply.
func (p *hitParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	n := strings.IndexByte(p.s[p.i:], '"')
	if n < 0 {
		return "", false
	}
	v := p.s[p.i : p.i+n]
	p.i += n + 1
	return v, strings.IndexByte(v, '\\') < 0 && !hasControl(v) && utf8.ValidString(v)
}

// hasControl reports whether s holds a byte below 0x20, eight bytes at a
// time: a byte b < 0x20 is the only way b-0x20 borrows into its top bit
// while b's own top bit is clear.
func hasControl(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8]
		// The compiler merges these into one 8-byte load.
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if (x-0x20*ones)&^x&highs != 0 {
			return true
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 {
			return true
		}
	}
	return false
}

// digits skips a run of decimal digits and reports how many there were.
func (p *hitParser) digits() int {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// intPart reads JSON's -?(0|[1-9][0-9]*).
func (p *hitParser) intPart() bool {
	p.byte('-')
	if p.byte('0') {
		return true
	}
	if p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9' {
		p.digits()
		return true
	}
	return false
}

// int reads an integer (no fraction or exponent: encoding/json refuses those
// for an int field).
func (p *hitParser) int() (int, bool) {
	start := p.i
	if !p.intPart() {
		return 0, false
	}
	n, err := strconv.Atoi(p.s[start:p.i])
	return n, err == nil
}

// float reads a JSON number as strconv.ParseFloat does for encoding/json.
func (p *hitParser) float() (float64, bool) {
	start := p.i
	if !p.intPart() {
		return 0, false
	}
	if p.byte('.') && p.digits() == 0 {
		return 0, false
	}
	if p.byte('e') || p.byte('E') {
		if !p.byte('+') {
			p.byte('-')
		}
		if p.digits() == 0 {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	return f, err == nil
}
