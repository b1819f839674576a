package chunker

import (
	"unicode"
	"unicode/utf8"
)

// trimSpan narrows [start, end) of text to exclude leading and trailing
// Unicode whitespace (the same set Normalize collapses).
func trimSpan(text string, start, end int) (int, int) {
	for start < end {
		r, n := utf8.DecodeRuneInString(text[start:end])
		if !unicode.IsSpace(r) {
			break
		}
		start += n
	}
	for end > start {
		r, n := utf8.DecodeLastRuneInString(text[start:end])
		if !unicode.IsSpace(r) {
			break
		}
		end -= n
	}
	return start, end
}

// sentences splits a block into sentence spans: after ., ! or ? (and any
// closing quotes or brackets) followed by whitespace, after CJK full stops,
// and, in code, at every line break.
func sentences(text string, s span) []span {
	var out []span
	start := s.start
	cut := func(at int) {
		if a, b := trimSpan(text, start, at); a < b {
			out = append(out, span{start: a, end: b})
		}
		start = at
	}
	for i := s.start; i < s.end; {
		r, n := utf8.DecodeRuneInString(text[i:s.end])
		i += n
		switch {
		case s.kind == kindCode || s.kind == kindTable:
			if r == '\n' {
				cut(i)
			}
		case r == '。' || r == '！' || r == '？':
			cut(i)
		case r == '.' || r == '!' || r == '?':
			j := i
			for j < s.end {
				c, m := utf8.DecodeRuneInString(text[j:s.end])
				if c != '"' && c != '\'' && c != ')' && c != ']' && c != '”' && c != '’' {
					break
				}
				j += m
			}
			if j < s.end {
				if c, _ := utf8.DecodeRuneInString(text[j:s.end]); unicode.IsSpace(c) {
					cut(j)
					i = j
				}
			}
		}
	}
	cut(s.end)
	return out
}

// words splits s into runs of non-whitespace.
func words(text string, s span) []span {
	var out []span
	start := -1
	for i := s.start; i < s.end; {
		r, n := utf8.DecodeRuneInString(text[i:s.end])
		if unicode.IsSpace(r) {
			if start >= 0 {
				out = append(out, span{start: start, end: i})
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += n
	}
	if start >= 0 {
		out = append(out, span{start: start, end: s.end})
	}
	return out
}

// groupWords packs consecutive word spans into groups of at most limit
// tokens. A single word over limit is returned alone for hardSplit.
func groupWords(text string, ws []span, limit int) []span {
	toks := make([]int, len(ws))
	for i, w := range ws {
		toks[i] = CountTokens(text[w.start:w.end])
	}
	var out []span
	for i := 0; i < len(ws); {
		j, est := i+1, toks[i]
		// Each word is counted with its own leading-space merge missing, so
		// the sum is close to but not always above the exact count; verify.
		for j < len(ws) && est+toks[j] <= limit {
			est += toks[j]
			j++
		}
		for j > i+1 && CountTokens(text[ws[i].start:ws[j-1].end]) > limit {
			j--
		}
		out = append(out, span{start: ws[i].start, end: ws[j-1].end})
		i = j
	}
	return out
}

// hardSplit cuts a run without whitespace (a long URL, base64, CJK text
// without punctuation) at rune boundaries into pieces of at most limit
// tokens. Each piece holds at least one rune, so it always makes progress.
func hardSplit(text string, s span, limit int) []span {
	var bounds []int // end offset of every rune
	for i := s.start; i < s.end; {
		_, n := utf8.DecodeRuneInString(text[i:s.end])
		i += n
		bounds = append(bounds, i)
	}
	// No cl100k token is longer than a few dozen bytes, so a piece of limit
	// tokens never needs more than this window; it keeps the search linear.
	window := limit * 64
	var out []span
	for k, start := 0, s.start; k < len(bounds); {
		hi := k
		for hi+1 < len(bounds) && bounds[hi+1]-start <= window {
			hi++
		}
		// Largest prefix within limit; BPE counts of prefixes are monotone
		// enough for binary search, and the chosen prefix is checked exactly.
		lo := k
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if CountTokens(text[start:bounds[mid]]) <= limit {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		out = append(out, span{start: start, end: bounds[lo]})
		start, k = bounds[lo], lo+1
	}
	return out
}
