package chunker

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
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
	start := 0
	for _, end := range ends {
		for start < end {
			// The estimate adds up separately counted pieces; BPE merges
			// across a join can differ, so verify the bound exactly and
			// move trailing units to the next chunk if it is broken.
			j := end
			s := text[units[start].start:units[j-1].end]
			n := CountTokens(s)
			for n > c.cfg.MaxTokens && j > start+1 {
				j--
				s = text[units[start].start:units[j-1].end]
				n = CountTokens(s)
			}
			chunks = append(chunks, Chunk{Position: len(chunks), Text: s, Hash: Hash(s), Tokens: n})
			start = j
		}
	}
	return chunks
}

// units scans text into blocks and breaks any block over MaxTokens into
// sentences (lines for code), then word groups, then rune-boundary pieces.
func (c *Chunker) units(text string) []unit {
	var out []unit
	add := func(s span, tokens int, heading bool) {
		sum := sha256.Sum256([]byte(Normalize(text[s.start:s.end])))
		out = append(out, unit{start: s.start, end: s.end, tokens: tokens, heading: heading,
			cut: binary.BigEndian.Uint64(sum[:8])})
	}
	max := c.cfg.MaxTokens
	for _, b := range blocks(text) {
		n := CountTokens(text[b.start:b.end])
		if n <= max {
			add(b, n, b.kind == kindHeading)
			continue
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
// whitespace between them, from prefix sums of separately counted pieces.
type estimator struct {
	units []int // units[k] = tokens of units before k
	gaps  []int // gaps[k] = tokens of gaps before unit k (gap k sits before unit k)
}

func newEstimator(text string, us []unit) estimator {
	e := estimator{units: make([]int, len(us)+1), gaps: make([]int, len(us)+1)}
	for k, u := range us {
		e.units[k+1] = e.units[k] + u.tokens
		g := 0
		if k > 0 {
			g = CountTokens(text[us[k-1].end:u.start])
		}
		e.gaps[k+1] = e.gaps[k] + g
	}
	return e
}

func (e estimator) tokens(i, j int) int {
	if j <= i {
		return 0
	}
	return e.units[j] - e.units[i] + e.gaps[j] - e.gaps[i+1]
}
