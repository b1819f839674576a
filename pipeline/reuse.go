package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/sink"
)

// DefaultMinSimilarity is ReuseConfig.MinSimilarity's default: a floor
// under the similarity the Predictor derives from the bound, so that a
// predictor trained on a model that barely moves never reuses across a
// rewrite. With ~350-word chunks it is ~10% of the words changed.
const DefaultMinSimilarity = 0.90

// Reuse measures, see ReuseConfig.Method.
const (
	ReuseMethodEdit    = "edit"
	ReuseMethodShingle = "shingle"
)

// What an edit that adds words does, see ReuseConfig.NewWords.
const (
	NewWordsEmbed      = "embed"
	NewWordsRepayFirst = "repay_first"
)

// ReuseConfig is near-duplicate reuse and the debt it runs up: a chunk
// whose exact content hash was never embedded may take the vector of one
// of its document's stored chunks when the Predictor expects that vector
// to be within Bound (cosine distance) of a fresh embedding of the new
// text. Similarity is measured against the ORIGIN text, the text the
// vector was computed from, never against the previous version, so small
// edits cannot accumulate. Every reused vector is debt: the chunk row
// records its origin (sink.Chunk.VectorHash), when the debt began and its
// predicted distance, and the Repayer replaces it with an exact vector
// within DebtConfig.Window.
type ReuseConfig struct {
	// Disabled turns near-duplicate reuse off: every new content hash is
	// embedded. Defaults to false (reuse on).
	Disabled bool
	// Bound is the largest predicted cosine distance a reused vector may
	// have. It is the monitor's fidelity bound (monitor.cosine_bound),
	// handed over by whoever composes the pipeline so that the reuse
	// decision and the monitor's alarm can never disagree; there is no
	// reuse setting of its own. Defaults to monitor.DefaultCosineBound.
	Bound float64
	// MinSimilarity is a floor, in (0, 1], under the similarity the
	// Predictor allows (see DefaultMinSimilarity). Defaults to
	// DefaultMinSimilarity.
	MinSimilarity float64
	// Method is the similarity measure: "edit" (word-level edit
	// similarity, 1 − D/(n+m)) or "shingle" (Jaccard of 3-word shingles,
	// about 3× stricter per changed word). The Predictor is calibrated on
	// edit similarity. Defaults to "edit".
	Method string
	// NewWords says what an edit that brings words the origin text lacks
	// (a new sentence, name or number) does: "embed" embeds the chunk at
	// once, so the new words are searchable on commit; "repay_first"
	// reuses the vector and puts the chunk first in the repayment queue.
	// Defaults to "embed" (see docs/write-path.md, "Near-duplicate reuse", for the
	// measurement behind it).
	NewWords string
	// Predictor predicts a reuse's distance and learns from measured
	// ones; share it with the Repayer so repayments calibrate it. Nil
	// uses a fresh NewPredictor(0).
	Predictor *Predictor
	// Now dates new debt, given the change's source timestamp (zero when
	// unknown). Nil means the wall clock; the edit-history benchmark dates
	// debt by source time.
	Now func(sourceTS time.Time) time.Time
}

func (c ReuseConfig) withDefaults() ReuseConfig {
	if c.Bound == 0 {
		c.Bound = monitor.DefaultCosineBound
	}
	if c.MinSimilarity == 0 {
		c.MinSimilarity = DefaultMinSimilarity
	}
	if c.Method == "" {
		c.Method = ReuseMethodEdit
	}
	if c.NewWords == "" {
		c.NewWords = NewWordsEmbed
	}
	if c.Predictor == nil {
		c.Predictor = NewPredictor(0)
	}
	if c.Now == nil {
		c.Now = func(time.Time) time.Time { return time.Now() }
	}
	return c
}

// Validate reports every invalid field, named by its ragsync.yaml path.
func (c ReuseConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.MinSimilarity <= 0 || c.MinSimilarity > 1 {
		errs = append(errs, fmt.Errorf("reuse.min_similarity: %v must be in (0, 1], e.g. 0.9; set reuse.enabled: false to turn reuse off", c.MinSimilarity))
	}
	if c.Method != ReuseMethodEdit && c.Method != ReuseMethodShingle {
		errs = append(errs, fmt.Errorf("reuse.method: %q is not one of edit, shingle", c.Method))
	}
	if c.NewWords != NewWordsEmbed && c.NewWords != NewWordsRepayFirst {
		errs = append(errs, fmt.Errorf("reuse.new_words: %q is not one of embed, repay_first", c.NewWords))
	}
	if c.Bound <= 0 || c.Bound >= 2 {
		errs = append(errs, fmt.Errorf("monitor.cosine_bound: %g must be in (0, 2), e.g. 0.05 (near-duplicate reuse keeps vectors within it)", c.Bound))
	}
	return errors.Join(errs...)
}

// similarity scores two texts, cut into their normalised words
// (chunker.Words), by the configured method.
func (c ReuseConfig) similarity(a, b []string, min float64) float64 {
	if c.Method == ReuseMethodShingle {
		return chunker.ShingleSimilarityWords(a, b)
	}
	return chunker.EditSimilarityWords(a, b, min)
}

// origin is a stored vector a new chunk may take. Its text is normalised
// and cut into words only when a new chunk's word count and first words
// leave their similarity able to reach the floor: a small edit of a large
// document compares its changed chunk with every origin, and most are ruled
// out by their word counts or their first words alone.
type origin struct {
	hash string
	raw  string // the text as stored
	n    int    // its words (chunker.WordCount)
	// words are its normalised words (chunker.Words), nil until compared;
	// pre its first words (chunker.WordsPrefix), for ruling it out; set
	// its distinct words (wordSet), nil until a chunk chose it.
	words, pre []string
	set        map[string]bool
	// since is when the oldest stored chunk that reuses this vector ran
	// into debt (zero: none does): a chunk taking it again inherits the
	// date, so a chain of edits cannot keep a vector stale past the window.
	since time.Time
}

// cut cuts the origin's text into its normalised words, once.
func (o *origin) cut() {
	if o.words == nil {
		o.words = chunker.Words(o.raw)
	}
}

// lacksWords says whether words (a new text's, compared with this origin,
// which is cut) hold a word (splitWords) the origin lacks: newWords. The
// words of their common prefix and suffix are the origin's own, so only
// the rest is looked up; a short rest is looked for in the origin's words
// directly, a long one in their set (built once).
func (o *origin) lacksWords(words []string) bool {
	ow := o.words
	for len(words) > 0 && len(ow) > 0 && words[0] == ow[0] {
		words, ow = words[1:], ow[1:]
	}
	for len(words) > 0 && len(ow) > 0 && words[len(words)-1] == ow[len(ow)-1] {
		words, ow = words[:len(words)-1], ow[:len(ow)-1]
	}
	if len(words) == 0 {
		return false
	}
	if o.set == nil && len(words) <= lookupWords {
		fresh := false
		for _, w := range words {
			eachWord(w, func(x string) {
				if !fresh && !o.has(x) {
					fresh = true
				}
			})
			if fresh {
				return true
			}
		}
		return false
	}
	if o.set == nil {
		o.set = wordSet(o.words)
	}
	return newWords(words, o.set)
}

// lookupWords is how many words lacksWords looks up by scanning the
// origin's words rather than by building their set.
const lookupWords = 4

// has says whether one of the origin's words has x among its splitWords.
func (o *origin) has(x string) bool {
	for _, w := range o.words {
		if wordHas(w, x) {
			return true
		}
	}
	return false
}

// wordHas says whether x is one of splitWords(w)'s words. For an ASCII w
// (the common case) it compares w's runs of letters and digits with x in
// place, lower-casing byte by byte: has runs it on every word of the
// origin, and cutting each through eachWord cost a call per run and a
// lower-cased copy per capitalised word.
func wordHas(w, x string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] >= utf8.RuneSelf {
			found := false
			eachWord(w, func(y string) { found = found || y == x })
			return found
		}
	}
	if len(x) == 0 || len(w) < len(x) {
		return false
	}
	for i := 0; i < len(w); {
		if !isASCIIWordByte(w[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(w) && isASCIIWordByte(w[j]) {
			j++
		}
		if j-i == len(x) && equalLowerASCII(w[i:j], x) {
			return true
		}
		i = j
	}
	return false
}

// isASCIIWordByte is an ASCII letter or digit: what splitWords keeps.
func isASCIIWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// equalLowerASCII says whether run (ASCII letters and digits) lower-cased
// is x, of the same length.
func equalLowerASCII(run, x string) bool {
	for k := 0; k < len(run); k++ {
		c := run[k]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != x[k] {
			return false
		}
	}
	return true
}

// prefix returns the origin's first k normalised words (all of them if it
// has fewer), cutting no more of its text than it must.
func (o *origin) prefix(k int) []string {
	if o.words != nil {
		return o.words[:min(k, len(o.words))]
	}
	if len(o.pre) < k && len(o.pre) < o.n {
		o.pre = chunker.WordsPrefix(o.raw, k)
	}
	return o.pre[:min(k, len(o.pre))]
}

// planReuse fills VectorHash for each chunk in missing (indexes into
// doc.Chunks) that can take a stored vector: one already stored for the
// same content (its row's origin and debt), else the most similar origin
// text whose predicted distance stays within the bound. It returns the
// indexes still to embed.
func (p *Pipeline) planReuse(cfg ReuseConfig, stored []sink.StoredChunk, doc *sink.Document, missing []int) []int {
	minSim := max(cfg.MinSimilarity, cfg.Predictor.MinSimilarity(cfg.Bound))
	if minSim >= 1 {
		return missing
	}
	byHash := make(map[string]sink.StoredChunk, len(stored))
	var origins []origin
	at := map[string]int{}
	for _, s := range stored {
		if s.OriginCached {
			byHash[s.Hash] = s
		}
		if !s.OriginCached || s.OriginText == "" {
			continue
		}
		i, ok := at[s.VectorHash]
		if !ok {
			i = len(origins)
			at[s.VectorHash] = i
			origins = append(origins, origin{hash: s.VectorHash, raw: s.OriginText, n: chunker.WordCount(s.OriginText)})
		}
		if o := &origins[i]; !s.DebtSince.IsZero() && (o.since.IsZero() || s.DebtSince.Before(o.since)) {
			o.since = s.DebtSince
		}
	}
	if len(byHash) == 0 && len(origins) == 0 {
		// A new document, or one whose vectors left the cache: nothing
		// to take, and nothing to normalise.
		return missing
	}
	now := cfg.Now(doc.SourceTS)
	var rest []int
	for _, i := range missing {
		c := &doc.Chunks[i]
		// Same content as a stored chunk whose vector is reused: keep
		// that chunk's origin and its debt, the bound was checked when it
		// was chosen.
		if s, ok := byHash[c.Hash]; ok && s.VectorHash != c.Hash {
			c.VectorHash, c.DebtSince, c.DebtDistance, c.DebtNewWords = s.VectorHash, s.DebtSince, s.DebtDistance, s.DebtNewWords
			if c.DebtSince.IsZero() {
				c.DebtSince = now
			}
			continue
		}
		words := chunker.Words(c.Text)
		best, bestSim := -1, 0.0
		for j := range origins {
			o := &origins[j]
			if cfg.Method == ReuseMethodEdit {
				// Where EditSimilarity would be 0, below minSim.
				maxD, ok := chunker.EditBudget(len(words), o.n, minSim)
				if !ok || !chunker.EditPrefixAllows(words, o.prefix(2*maxD+1), maxD) {
					continue
				}
			}
			o.cut()
			if sim := cfg.similarity(words, o.words, minSim); sim >= minSim && sim > bestSim {
				best, bestSim = j, sim
			}
		}
		if best < 0 {
			rest = append(rest, i)
			continue
		}
		o := &origins[best]
		fresh := o.lacksWords(words)
		if fresh && cfg.NewWords == NewWordsEmbed {
			p.stats.add("reuse_new_words_embedded", 1)
			rest = append(rest, i)
			continue
		}
		if fresh {
			p.stats.add("reuse_new_words_deferred", 1)
		}
		c.VectorHash, c.DebtDistance, c.DebtNewWords, c.DebtSince = o.hash, cfg.Predictor.Predict(bestSim), fresh, o.since
		if c.DebtSince.IsZero() {
			c.DebtSince = now
		}
	}
	return rest
}

// splitWords cuts a text into lower-cased runs of letters and digits.
func splitWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
}

// eachWord calls f with each of splitWords(w)'s words, without allocating
// for an ASCII word already in lower case (the common case).
func eachWord(w string, f func(string)) {
	for i := 0; i < len(w); i++ {
		if w[i] >= utf8.RuneSelf {
			for _, x := range splitWords(w) {
				f(x)
			}
			return
		}
	}
	// ASCII: the letters are A-Z and a-z, the digits 0-9.
	start, upper := -1, false
	for i := 0; i <= len(w); i++ {
		if i < len(w) {
			c := w[i]
			lowerOrDigit := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
			if isUpper := 'A' <= c && c <= 'Z'; lowerOrDigit || isUpper {
				if start < 0 {
					start, upper = i, false
				}
				upper = upper || isUpper
				continue
			}
		}
		if start >= 0 {
			run := w[start:i]
			if upper {
				run = strings.ToLower(run)
			}
			f(run)
			start = -1
		}
	}
}

// wordSet returns the distinct words (splitWords) of a text cut into its
// normalised words (chunker.Words). Whitespace separates splitWords' words
// too, and lower-casing maps rune by rune, so cutting each word is cutting
// the text.
func wordSet(words []string) map[string]bool {
	out := make(map[string]bool, len(words))
	for _, w := range words {
		eachWord(w, func(x string) { out[x] = true })
	}
	return out
}

// newWords says whether a text, cut into its normalised words, has a word
// (case and punctuation aside) that origin lacks: a new sentence, name or
// number, which the origin's vector cannot match.
func newWords(words []string, origin map[string]bool) bool {
	fresh := false
	for _, w := range words {
		eachWord(w, func(x string) { fresh = fresh || !origin[x] })
		if fresh {
			return true
		}
	}
	return false
}
