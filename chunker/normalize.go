package chunker

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Normalize returns s in Unicode NFC with every run of whitespace replaced by
// one space and no leading or trailing whitespace. Two texts that differ only
// in composition or layout normalise to the same string, so re-wrapping a
// paragraph does not re-embed it.
func Normalize(s string) string {
	if n, ok := normalASCII(s); ok {
		return s[:n]
	}
	return normalize(s)
}

// normalASCII reports whether s is ASCII (so in NFC) with its words
// separated by single spaces and no leading whitespace, the layout of most
// prose, and then how much of it Normalize keeps: all of it, less one
// trailing space. It looks at each byte once and copies nothing.
func normalASCII(s string) (int, bool) {
	if len(s) > 0 && s[0] == ' ' {
		return 0, false
	}
	prevSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || asciiSpace[c] != 0 && (c != ' ' || prevSpace) {
			return 0, false
		}
		prevSpace = c == ' '
	}
	if prevSpace {
		return len(s) - 1, true
	}
	return len(s), true
}

// normalize is Normalize for any text.
func normalize(s string) string {
	s = norm.NFC.String(s) // s itself when it is in NFC already
	// One pass, and no copy when the layout is normal already (single
	// spaces between words): strings.Fields and Join cost two copies.
	var b strings.Builder
	space, copied, words, lastEnd := false, false, 0, 0
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		var isSpace bool
		if r < utf8.RuneSelf {
			isSpace = asciiSpace[r] != 0
		} else {
			r, size = utf8.DecodeRuneInString(s[i:])
			isSpace = unicode.IsSpace(r)
		}
		if isSpace {
			if !copied && (r != ' ' || space || words == 0) {
				b.Grow(len(s))
				b.WriteString(s[:lastEnd]) // up to the last word's end
				copied = true
			}
			space = true
			i += size
			continue
		}
		if space && words > 0 && copied {
			b.WriteByte(' ')
		}
		space = false
		// The start of a word.
		j := i + size
		for j < len(s) {
			if c := s[j]; c < utf8.RuneSelf {
				if asciiSpace[c] != 0 {
					break
				}
				j++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[j:])
			if unicode.IsSpace(r) {
				break
			}
			j += size
		}
		if copied {
			b.WriteString(s[i:j])
		}
		words++
		i, lastEnd = j, j
	}
	if !copied {
		return s[:lastEnd] // at most one trailing space to drop
	}
	return b.String()
}

// Hash returns the hex SHA-256 of Normalize(s): the content key of a chunk.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(Normalize(s)))
	return hex.EncodeToString(sum[:])
}
