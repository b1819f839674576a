package embedder

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unicode"

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

// ReportedModel is "": no provider reports a model.
func (h *Hashing) ReportedModel() string { return "" }

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
func fnv1a(ns byte, s string) uint64 {
	h := uint64(fnvOffset)
	h ^= uint64(ns)
	h *= fnvPrime
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func (h *Hashing) vector(text string) []float32 {
	text = strings.ToLower(strings.Join(strings.Fields(norm.NFC.String(text)), " "))
	// Features are summed in first-seen order, not map order: float addition
	// is not associative, and the same text must give bit-identical vectors.
	tf := map[uint64]int{}
	var order []uint64
	add := func(f uint64) {
		if tf[f] == 0 {
			order = append(order, f)
		}
		tf[f]++
	}
	words := strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.IsMark(r)
	})
	// Function words carry no topic and, hashed, would make every English
	// text look alike; they are dropped before any feature is made.
	content := words[:0:0]
	for _, w := range words {
		if !stopwords[w] {
			content = append(content, w)
		}
	}
	weight := map[uint64]float64{}
	for i, w := range content {
		add(fnv1a('w', w))
		if i > 0 {
			add(fnv1a('b', content[i-1]+" "+w))
		}
		// Character 3-grams inside each word let "leaves" meet "leaf" and
		// "chains" meet "chain"; they weigh less than whole words.
		runes := []rune(" " + w + " ")
		for j := 0; j+3 <= len(runes); j++ {
			f := fnv1a('c', string(runes[j:j+3]))
			add(f)
			weight[f] = trigramWeight
		}
	}
	if len(order) == 0 && text != "" {
		// Only stopwords or punctuation: fall back to 3-grams of the whole
		// text, because a zero vector has no cosine distance (pgvector
		// returns NaN) and such a chunk could never be found or compared.
		runes := []rune(" " + text + " ")
		for j := 0; j+3 <= len(runes); j++ {
			add(fnv1a('c', string(runes[j:j+3])))
		}
	}
	acc := make([]float64, h.dims)
	for _, f := range order {
		w := 1 + math.Log(float64(tf[f]))
		if fw, ok := weight[f]; ok {
			w *= fw
		}
		if f>>63 == 1 {
			w = -w
		}
		acc[f%uint64(h.dims)] += w
	}
	var norm2 float64
	for _, x := range acc {
		norm2 += x * x
	}
	v := make([]float32, h.dims)
	if norm2 == 0 {
		return v
	}
	inv := 1 / math.Sqrt(norm2)
	for i, x := range acc {
		v[i] = float32(x * inv)
	}
	return v
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
