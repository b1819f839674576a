package chunker

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Chunk is one piece of a document, ready to hash-diff and embed.
type Chunk struct {
	// Position is the 0-based order of the chunk in the document.
	Position int
	// Text is the chunk as it appears in the input: an exact substring, not
	// normalised, without leading or trailing whitespace.
	Text string
	// Hash is Hash(Text): the hex SHA-256 of Normalize(Text).
	Hash string
	// Tokens is the cl100k_base token count of Text.
	Tokens int
}

// unit is the smallest piece the packers place: a structural block, or a
// sentence, word group or hard-split piece of a block over MaxTokens.
type unit struct {
	start, end int
	tokens     int
	heading    bool
	// cut is a 64-bit digest of the unit's normalised text, from which the
	// content-defined strategy decides whether a boundary follows it.
	cut uint64
	// norm is the unit's normalised text, from which its chunk's hash is
	// composed (see chunkHash): each text is normalised once.
	norm string
}

// strategy decides chunk boundaries over units. It returns the end index of
// every chunk (exclusive, increasing, the last equal to len(units)). The
// packing is kept behind this interface so strategies can be swapped
// without touching block scanning or the size guarantees in Split.
type strategy interface {
	boundaries(units []unit, est estimator) []int
}

// Chunker splits documents according to a Config. It holds no mutable state
// and is safe for concurrent use.
type Chunker struct {
	cfg      Config
	strategy strategy
}

// New returns a Chunker for cfg after applying defaults; the error lists
// every invalid field.
func New(cfg Config) (*Chunker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("chunker config: %w", err)
	}
	c := &Chunker{cfg: cfg}
	switch cfg.Strategy {
	case StrategyGreedy:
		c.strategy = greedy{target: cfg.TargetTokens, min: cfg.MinTokens}
	default:
		c.strategy = newContentDefined(cfg)
	}
	return c, nil
}

// Fingerprint is the fingerprint of the chunker's settings (see
// Config.Fingerprint).
func (c *Chunker) Fingerprint() string { return c.cfg.Fingerprint() }

// Split returns the chunks of text in document order. Whitespace-only text
// gives no chunks. Concatenating the chunk texts gives text back except for
// the whitespace between chunks, and every chunk has at most MaxTokens
// tokens unless it is a single rune that alone exceeds it.
func (c *Chunker) Split(text string) []Chunk {
	units := c.units(text)
	if len(units) == 0 {
		return nil
	}
	est := newEstimator(text, units)
	ends := c.strategy.boundaries(units, est)

	chunks := make([]Chunk, 0, len(ends))
	var scratch []byte // chunkHash's buffer, reused across the chunks
	start := 0
	for _, end := range ends {
		for start < end {
			// The estimate adds up separately counted pieces; BPE merges
			// across a join can differ, so the bound is checked against the
			// exact count, and trailing units move to the next chunk if it
			// is broken. est.exact composes that count from the pieces when
			// every join is one whose effect it can price (the chunker
			// once counted each text twice); otherwise it is counted.
			j := end
			n := est.count(start, j)
			for n > c.cfg.MaxTokens && j > start+1 {
				j--
				n = est.count(start, j)
			}
			s := text[units[start].start:units[j-1].end]
			chunks = append(chunks, Chunk{Position: len(chunks), Text: s, Hash: chunkHash(text, units[start:j], &scratch), Tokens: n})
			start = j
		}
	}
	return chunks
}

// units scans text into blocks and breaks any block over MaxTokens into
// sentences (lines for code, and rows for a pipe table under the
// content-defined strategy), then word groups, then rune-boundary pieces.
//
// A table is cut at its rows because prose splitting finds no sentence end
// in one and falls back to word groups of TargetTokens, whose edges fall
// inside rows and make the chunk an edit lands in large: on the edits-C
// history one generated table, edited 218 times, took 28% of the update
// tokens, and cutting it at rows saves 13% of them. Greedy keeps prose
// splitting: it is the incremental benchmark's baseline (G), which must
// not move.
func (c *Chunker) units(text string) []unit {
	var out []unit
	var scratch []byte // the bytes to hash, without a new copy per unit
	add := func(s span, tokens int, heading bool) {
		n := Normalize(text[s.start:s.end])
		scratch = append(scratch[:0], n...)
		sum := sha256.Sum256(scratch)
		out = append(out, unit{start: s.start, end: s.end, tokens: tokens, heading: heading,
			cut: binary.BigEndian.Uint64(sum[:8]), norm: n})
	}
	max := c.cfg.MaxTokens
	for _, b := range blocks(text) {
		n := CountTokens(text[b.start:b.end])
		if n <= max {
			add(b, n, b.kind == kindHeading)
			continue
		}
		if c.cfg.Strategy == StrategyContentDefined && b.kind == kindText && isTable(text[b.start:b.end]) {
			b.kind = kindTable
		}
		for i, s := range sentences(text, b) {
			s.kind = b.kind
			n := CountTokens(text[s.start:s.end])
			if n <= max {
				add(s, n, i == 0 && b.kind == kindHeading)
				continue
			}
			for _, g := range groupWords(text, words(text, s), c.cfg.TargetTokens) {
				n := CountTokens(text[g.start:g.end])
				if n <= max {
					add(g, n, false)
					continue
				}
				for _, p := range hardSplit(text, g, max) {
					add(p, CountTokens(text[p.start:p.end]), false)
				}
			}
		}
	}
	return out
}

// estimator gives an O(1) token estimate of units [i, j) joined with the
// whitespace between them, from prefix sums of separately counted pieces,
// and the exact count of such a join where the joins allow (see junction).
type estimator struct {
	text  string
	us    []unit
	units []int // units[k] = tokens of units before k
	gaps  []int // gaps[k] = tokens of gaps before unit k (gap k sits before unit k)
	// fix[k] sums the corrections of the joins before unit k, and dirty[k]
	// counts the joins among them whose correction is unknown.
	fix, dirty []int
}

func newEstimator(text string, us []unit) estimator {
	e := estimator{text: text, us: us, units: make([]int, len(us)+1), gaps: make([]int, len(us)+1),
		fix: make([]int, len(us)+1), dirty: make([]int, len(us)+1)}
	// Gaps and join pieces repeat ("\n\n", ".\n\n") and each count pays the
	// tokenizer's fixed cost, so they are counted once per text.
	memo := map[string]int{}
	count := func(s string) int {
		n, ok := memo[s]
		if !ok {
			n = CountTokens(s)
			memo[s] = n
		}
		return n
	}
	for k, u := range us {
		e.units[k+1] = e.units[k] + u.tokens
		g, fix, dirty := 0, 0, 0
		if k > 0 {
			gap := text[us[k-1].end:u.start]
			g = count(gap)
			if d, ok := junction(text, us[k-1], u, count); ok {
				fix = d
			} else {
				dirty = 1
			}
		}
		e.gaps[k+1] = e.gaps[k] + g
		e.fix[k+1] = e.fix[k] + fix
		e.dirty[k+1] = e.dirty[k] + dirty
	}
	return e
}

func (e estimator) tokens(i, j int) int {
	if j <= i {
		return 0
	}
	return e.units[j] - e.units[i] + e.gaps[j] - e.gaps[i+1]
}

// count returns the exact token count of units [i, j) as they appear in
// the text, composed from the pieces when every join inside is priced, and
// counted otherwise.
func (e estimator) count(i, j int) int {
	if j-i == 1 {
		return e.us[i].tokens
	}
	if e.dirty[j] == e.dirty[i+1] {
		return e.tokens(i, j) + e.fix[j] - e.fix[i+1]
	}
	return CountTokens(e.text[e.us[i].start:e.us[j-1].end])
}

// junction returns how many tokens joining a, the gap after it and b costs
// beyond their separate counts, when that can be known without counting the
// join, and false otherwise.
//
// cl100k_base splits text with a regular expression before BPE, and BPE runs
// within each piece, so a join changes the count only where the split
// differs from the split of the parts. The expression has no look-behind,
// so b splits the same after the gap. A gap of line breaks alone is one
// piece (\s*[\r\n]+) and stays one if a ends with an ASCII letter or digit,
// whose runs cannot take line breaks. If a ends with a run of ASCII
// punctuation, " ?[^\s\p{L}\p{N}]+[\r\n]*" swallows the gap into that run's
// piece: the correction is that piece's count minus the two separate ones.
// Anything else (spaces in the gap, non-ASCII at an edge, no gap at all)
// is left to an exact count. The chunker's tests compare every chunk's
// Tokens with CountTokens of its text, on fuzzed and real input.
func junction(text string, a, b unit, count func(string) int) (int, bool) {
	gap := text[a.end:b.start]
	if gap == "" || strings.Trim(gap, "\r\n") != "" || a.end <= a.start {
		return 0, false
	}
	if c := text[b.start]; c <= ' ' || c >= 0x7f {
		return 0, false
	}
	last := text[a.end-1]
	switch {
	case isASCIIAlnum(last):
		return 0, true
	case !isASCIIPunct(last):
		return 0, false
	}
	r := a.end - 1
	for r > a.start && isASCIIPunct(text[r-1]) {
		r--
	}
	if r > a.start {
		switch prev := text[r-1]; {
		case prev == ' ':
			r-- // " ?" takes one space into the piece
		case prev >= 0x80 || (prev < ' ' && prev != '\t' && prev != '\n' && prev != '\r'):
			// A non-ASCII symbol may belong to the run; a control
			// character is neither space nor letter.
			return 0, false
		}
	}
	tail := text[r:a.end]
	return count(tail+gap) - count(tail) - count(gap), true
}

func isASCIIAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isASCIIPunct reports an ASCII byte that is neither space, letter, digit
// nor control: the [^\s\p{L}\p{N}] class restricted to ASCII.
func isASCIIPunct(c byte) bool {
	return c > ' ' && c < 0x7f && !isASCIIAlnum(c)
}

// chunkHash is Hash of the text us span, composed from the units'
// normalised texts instead of normalising the chunk again. Where units are
// separated by whitespace, the normalised chunk is their normalised texts
// joined by single spaces: whitespace neither composes nor reorders with
// its neighbours under NFC, and Normalize collapses it to one space. Units
// that touch (a word cut at rune boundaries) could compose across the cut,
// so such a chunk is normalised whole.
func chunkHash(text string, us []unit, scratch *[]byte) string {
	for k := 1; k < len(us); k++ {
		gap := text[us[k-1].end:us[k].start]
		if gap == "" || strings.TrimSpace(gap) != "" {
			return Hash(text[us[0].start:us[len(us)-1].end])
		}
	}
	// The normalised chunk, in a buffer the caller reuses: hashing each
	// unit's text through a hash.Hash copied it first.
	b := (*scratch)[:0]
	for _, u := range us {
		if u.norm == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, u.norm...)
	}
	*scratch = b
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
