package embedder

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Hashing is an offline, deterministic embedder: feature hashing of
// lower-cased word unigrams, word bigrams and character 3-grams. Each
// feature is hashed with FNV-1a (64-bit) to a dimension and a sign, weighted
// by sublinear term frequency 1+ln(tf), and the vector is L2-normalised.
// Texts that share words or spellings get a positive cosine similarity, so
// search works end to end without a model; it is not semantic.
//
// The zero value is unusable; call NewHashing. Hashing is safe for
// concurrent use.
type Hashing struct {
	dims int
}

// NewHashing returns a Hashing embedder producing vectors of dims entries.
func NewHashing(dims int) *Hashing { return &Hashing{dims: dims} }

// Model returns "hashing-v1".
func (h *Hashing) Model() string { return HashingModel }

// Dimensions returns the vector length.
func (h *Hashing) Dimensions() int { return h.dims }

// ReportedModel is the embedder's versioned name ("hashing-v1"): it is
// its own provider, and chunk rows record which version embedded them.
func (h *Hashing) ReportedModel() string { return HashingModel }

// EmbedCounted is Embed; the vectors do not depend on token counts.
func (h *Hashing) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return h.Embed(ctx, texts)
}

// Embed returns one unit-length vector per text; an empty text gives the
// zero vector. It fails only on a cancelled ctx or dims < 1.
func (h *Hashing) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	if h.dims < 1 {
		return nil, fmt.Errorf("embed with %s: dimensions must be > 0, got %d", HashingModel, h.dims)
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		// A long batch checks ctx as it goes; hashing is fast but not free.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = h.vector(t)
	}
	return out, nil
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv1a hashes a feature namespace byte followed by s, so that the word
// "the" and the trigram "the" land on different dimensions.
func fnv1a(ns byte, s string) uint64 { return fnvString(fnvStart(ns), s) }

func (h *Hashing) vector(text string) []float32 {
	text, content := contentWords(text)
	// Features are summed in first-seen order, not map order: float addition
	// is not associative, and the same text must give bit-identical vectors.
	// One map from a feature to its place in order; the hashes are computed
	// as the bytes go by, without building the bigram and 3-gram strings.
	fs := features{at: map[uint64]int{}}
	for i, w := range content {
		fs.add(fnv1a('w', w), false)
		if i > 0 {
			fs.add(fnvString(fnvByte(fnvString(fnvStart('b'), content[i-1]), ' '), w), false)
		}
		// Character 3-grams inside each word let "leaves" meet "leaf" and
		// "chains" meet "chain"; they weigh less than whole words.
		fs.trigrams(w, true)
	}
	if len(fs.order) == 0 && text != "" {
		// Only stopwords or punctuation: fall back to 3-grams of the whole
		// text, because a zero vector has no cosine distance (pgvector
		// returns NaN) and such a chunk could never be found or compared.
		fs.trigrams(text, false)
	}
	acc := make([]float64, h.dims)
	for k, f := range fs.order {
		w := 1 + math.Log(float64(fs.tf[k]))
		if fs.tri[k] {
			w *= trigramWeight
		}
		if f>>63 == 1 {
			w = -w
		}
		acc[f%uint64(h.dims)] += w
	}
	return unitLength(acc)
}

// contentWords returns text normalised (NFC, lower case, whitespace runs
// as one space) and its words without the stopwords. Function words carry
// no topic and, hashed, would make every English text look alike; they are
// dropped before any feature is made.
func contentWords(text string) (string, []string) {
	text = strings.ToLower(strings.Join(strings.Fields(norm.NFC.String(text)), " "))
	words := strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.IsMark(r)
	})
	content := words[:0:0]
	for _, w := range words {
		if !stopwords[w] {
			content = append(content, w)
		}
	}
	return text, content
}

// unitLength returns acc scaled to length 1, as float32s; all zeros stay
// zeros.
func unitLength(acc []float64) []float32 {
	var norm2 float64
	for _, x := range acc {
		norm2 += x * x
	}
	v := make([]float32, len(acc))
	if norm2 == 0 {
		return v
	}
	inv := 1 / math.Sqrt(norm2)
	for i, x := range acc {
		v[i] = float32(x * inv)
	}
	return v
}

// features counts a text's features in the order they are first seen.
type features struct {
	at    map[uint64]int // a feature's index in order
	order []uint64
	tf    []int
	tri   []bool // weighed as a 3-gram (it was added as one)
}

func (fs *features) add(f uint64, trigram bool) {
	k, ok := fs.at[f]
	if !ok {
		k = len(fs.order)
		fs.at[f] = k
		fs.order = append(fs.order, f)
		fs.tf = append(fs.tf, 0)
		fs.tri = append(fs.tri, false)
	}
	fs.tf[k]++
	fs.tri[k] = fs.tri[k] || trigram
}

// trigrams adds the character 3-grams of " " + s + " ", each hashed as the
// UTF-8 of its three runes (an invalid byte counts as U+FFFD, as converting
// to []rune and back would make it); weighed says whether they weigh as
// 3-grams.
func (fs *features) trigrams(s string, weighed bool) {
	var win [3]rune
	n := 0
	push := func(r rune) {
		win[0], win[1], win[2] = win[1], win[2], r
		if n++; n >= 3 {
			h := fnvStart('c')
			for _, x := range win {
				h = fnvRune(h, x)
			}
			fs.add(h, weighed)
		}
	}
	push(' ')
	for _, r := range s {
		push(r)
	}
	push(' ')
}

// fnvStart, fnvByte, fnvString and fnvRune compute fnv1a step by step, so
// a bigram or 3-gram is hashed without building its string.
func fnvStart(ns byte) uint64 { return fnvByte(fnvOffset, ns) }

func fnvByte(h uint64, c byte) uint64 { return (h ^ uint64(c)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvRune(h uint64, r rune) uint64 {
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		h = fnvByte(h, c)
	}
	return h
}

// trigramWeight scales character 3-gram features against word features.
const trigramWeight = 0.25

// stopwords are common English function words.
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those through
to too under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves s t don won isn aren wasn weren doesn didn can't won't it's i'm you're`) {
		m[w] = true
	}
	return m
}()
