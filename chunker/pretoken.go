package chunker

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// cl100k_base splits text with a regular expression before BPE runs on each
// piece:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// The tokenizer runs it with a backtracking engine that allocates per match,
// which made counting most of ragsync's CPU during a load. nextPiece is the
// same expression written out for ASCII, where \p{L} is [A-Za-z], \p{N} is
// [0-9] and \s is [\t\n\v\f\r ]; around other bytes the tokenizer counts. A piece's count does not depend on its neighbours,
// so counts are cached per piece. TestCountTokensASCII compares the result
// with the tokenizer's on real and random text.

func isSpaceASCII(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

func isLetterASCII(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigitASCII(c byte) bool { return c >= '0' && c <= '9' }

// isPunctASCII is [^\s\p{L}\p{N}] over printable ASCII.
func isPunctASCII(c byte) bool { return !isSpaceASCII(c) && !isLetterASCII(c) && !isDigitASCII(c) }

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// nextPiece returns the length of the piece that starts s (non-empty,
// printable ASCII or \t\n\v\f\r), trying the alternatives in the
// expression's order, and how many bytes of s the choice looked at: a
// choice that looked at all of s may change when more text follows.
func nextPiece(s string) (k, seen int) {
	n := len(s)
	c := s[0]
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c == '\'' && n > 1 {
		switch d := lower(s[1]); {
		case d == 's' || d == 't' || d == 'm' || d == 'd':
			return 2, min(3, n)
		case n > 2 && (d == 'r' || d == 'v') && lower(s[2]) == 'e', n > 2 && d == 'l' && lower(s[2]) == 'l':
			return 3, min(4, n)
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	i := 0
	if c != '\r' && c != '\n' && !isLetterASCII(c) && !isDigitASCII(c) && n > 1 && isLetterASCII(s[1]) {
		i = 1
	}
	if isLetterASCII(s[i]) {
		for i < n && isLetterASCII(s[i]) {
			i++
		}
		return i, min(i+1, n)
	}
	// \p{N}{1,3}
	if isDigitASCII(c) {
		i = 1
		for i < n && i < 3 && isDigitASCII(s[i]) {
			i++
		}
		return i, min(i+1, n)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	i = 0
	if c == ' ' && n > 1 && isPunctASCII(s[1]) {
		i = 1
	}
	if isPunctASCII(s[i]) {
		for i < n && isPunctASCII(s[i]) {
			i++
		}
		for i < n && (s[i] == '\r' || s[i] == '\n') {
			i++
		}
		return i, min(i+1, n)
	}
	// The rest start with whitespace: e is the end of the run.
	e := 0
	lastNL := -1
	for e < n && isSpaceASCII(s[e]) {
		if s[e] == '\r' || s[e] == '\n' {
			lastNL = e
		}
		e++
	}
	seen = min(e+1, n)
	switch {
	case lastNL >= 0: // \s*[\r\n]+ : \s* backtracks to the run's last line break
		return lastNL + 1, seen
	case e == n: // \s+(?!\S) at the end
		return e, seen
	case e > 1: // \s+(?!\S) : the run less its last space, a non-space follows
		return e - 1, seen
	default: // \s+
		return e, seen
	}
}

// safeASCII reports a byte nextPiece classifies exactly. (The tokenizer's
// expression matches DEL with no alternative and drops it; other controls
// are left to the tokenizer too.)
func safeASCII(c byte) bool { return c >= ' ' && c < 0x7f || c >= '\t' && c <= '\r' }

// pieceCache maps a piece to its BPE count. It is direct-mapped and
// lock-free: a slot holds the last piece stored there, so memory stays
// bounded however many distinct pieces a process sees.
type pieceCache struct {
	seed  maphash.Seed
	slots [1 << 16]atomic.Pointer[pieceCount]
}

type pieceCount struct {
	piece string
	n     int
}

var pieceCounts = &pieceCache{seed: maphash.MakeSeed()}

// maxCachedPiece keeps long pieces (base64, long numbers are split anyway)
// from holding memory in the cache; they are rare and counted each time.
const maxCachedPiece = 32

func (c *pieceCache) count(p string, slow func(string) int) int {
	if len(p) > maxCachedPiece {
		return slow(p)
	}
	slot := &c.slots[maphash.String(c.seed, p)&(uint64(len(c.slots))-1)]
	if e := slot.Load(); e != nil && e.piece == p {
		return e.n
	}
	n := slow(p)
	slot.Store(&pieceCount{piece: strings.Clone(p), n: n})
	return n
}

// countPieces counts s piece by piece. Around bytes nextPiece does not
// classify, the tokenizer counts a window that starts where a piece starts
// and ends after a line break followed by an ASCII letter: no piece spans
// that point (letters never follow a line break within a piece) and the
// expression has no look-behind, so the window splits as it does in s.
func countPieces(s string, slow func(string) int) int {
	total := 0
	for p := 0; p < len(s); {
		u := p
		for u < len(s) && safeASCII(s[u]) {
			u++
		}
		for p < u {
			k, seen := nextPiece(s[p:u])
			if seen == u-p && u < len(s) {
				break // the piece may run into, or depend on, what follows
			}
			total += pieceCounts.count(s[p:p+k], slow)
			p += k
		}
		if p == len(s) {
			break
		}
		w := max(u, p) + 1
		for w < len(s) && (s[w-1] != '\n' || !isLetterASCII(s[w])) {
			w++
		}
		total += slow(s[p:w])
		p = w
	}
	return total
}
