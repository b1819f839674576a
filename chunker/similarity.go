package chunker

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/glaslos/ssdeep"
	"golang.org/x/text/unicode/norm"
)

// FuzzyMinBytes is the smallest input ssdeep hashes: github.com/glaslos/ssdeep
// refuses inputs of up to 4096 bytes (ErrFileTooSmall) unless its global
// Force switch is set. ragsync never sets Force: it is a package variable,
// so flipping it in one goroutine would change the results of every other
// caller, and digests of such short inputs are too coarse to score anyway.
const FuzzyMinBytes = 4096

// ErrTooShortForFuzzy means a text is too short for ssdeep (see
// FuzzyMinBytes); callers fall back to ShingleSimilarity.
var ErrTooShortForFuzzy = errors.New("text too short for ssdeep (at most 4096 bytes)")

// Similarity methods, as reported by DocSimilarity.
const (
	MethodSsdeep  = "ssdeep"
	MethodShingle = "shingle"
)

// FuzzyHash returns the ssdeep hash of Normalize(text), or
// ErrTooShortForFuzzy when the normalised text has at most FuzzyMinBytes
// bytes. Normalising first keeps a reflowed document's hash unchanged.
func FuzzyHash(text string) (string, error) {
	n := Normalize(text)
	if len(n) <= FuzzyMinBytes {
		return "", ErrTooShortForFuzzy
	}
	h, err := ssdeep.FuzzyBytes([]byte(n))
	if err != nil {
		// Too large or no usable block size: treat like too short, so
		// callers take the shingle path instead of failing on input.
		return "", errors.Join(ErrTooShortForFuzzy, err)
	}
	return h, nil
}

// FuzzyScore compares two ssdeep hashes: 0 (nothing in common) to 100
// (identical). Malformed hashes score 0 with the error.
func FuzzyScore(h1, h2 string) (int, error) {
	return ssdeep.Distance(h1, h2)
}

// DocSimilarity scores how similar two document texts are, 0–100. When both
// normalised texts are long enough for ssdeep it compares their ssdeep
// hashes (method "ssdeep"); otherwise it uses ShingleSimilarity scaled to
// 0–100 (method "shingle"), so short documents get a score too and the
// caller can say which measure produced it.
func DocSimilarity(a, b string) (score int, method string) {
	hb, errB := FuzzyHash(b)
	return DocSimilarityTo(a, b, hb, errB)
}

// DocSimilarityTo is DocSimilarity for a b already hashed: hb and errB are
// what FuzzyHash(b) returned. A caller that keeps b's hash saves hashing it
// twice.
func DocSimilarityTo(a, b, hb string, errB error) (score int, method string) {
	ha, errA := FuzzyHash(a)
	if errA == nil && errB == nil {
		if s, err := FuzzyScore(ha, hb); err == nil {
			return s, MethodSsdeep
		}
	}
	return int(ShingleSimilarity(a, b)*100 + 0.5), MethodShingle
}

// Words returns the normalised words of s, the unit every similarity here
// counts in. Normalize is NFC with whitespace runs collapsed, and the
// collapsing changes no word, so the words are those of the NFC text.
func Words(s string) []string { return strings.Fields(norm.NFC.String(s)) }

// WordCount is len(Words(s)) without normalising or allocating: NFC
// neither adds, removes nor moves whitespace, so the count of the raw text
// is the count of the normalised one.
func WordCount(s string) int { return countWords(s) }

// ShingleSimilarity is the Jaccard similarity (0..1) of the sets of 3-word
// shingles of the two normalised texts; texts under three words compare as
// their single shingle. Two empty texts are identical (1). One changed word
// in a 350-word text changes up to 3 shingles, about 0.983.
func ShingleSimilarity(a, b string) float64 {
	return ShingleSimilarityWords(Words(a), Words(b))
}

// ShingleSimilarityWords is ShingleSimilarity of two texts already cut
// into their words (Words), so that a text compared with many others is
// normalised and cut once.
func ShingleSimilarityWords(wa, wb []string) float64 {
	sa, sb := shingles(wa), shingles(wb)
	if len(sa) == 0 && len(sb) == 0 {
		return 1
	}
	small, large := sa, sb
	if len(small) > len(large) {
		small, large = large, small
	}
	inter := 0
	for s := range small {
		if _, ok := large[s]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(sa)+len(sb)-inter)
}

func shingles(w []string) map[string]struct{} {
	const k = 3
	out := make(map[string]struct{}, len(w))
	if len(w) == 0 {
		return out
	}
	if len(w) < k {
		out[strings.Join(w, " ")] = struct{}{}
		return out
	}
	for i := 0; i+k <= len(w); i++ {
		out[strings.Join(w[i:i+k], " ")] = struct{}{}
	}
	return out
}

// EditSimilarity is 1 − D/(n+m), where D is the word-level insert/delete
// edit distance between the normalised texts and n, m their word counts
// (difflib's ratio over words: 2·LCS/(n+m)). One changed word in a
// 350-word text scores 1 − 2/700 ≈ 0.997; two empty texts score 1. It
// returns 0 as soon as the score is known to be below min, which keeps the
// cost O((n+m)·D) for the similar pairs that matter (Myers' algorithm).
func EditSimilarity(a, b string, min float64) float64 {
	return editSimilarityWords(Words(a), Words(b), min)
}

// EditSimilarityWords is EditSimilarity of two texts already cut into
// their words (Words), so that a text compared with many others is
// normalised and cut once. Words are compared as strings, without the
// table of word ids EditSimilarity builds: a pair that is far apart costs
// O(D²) comparisons for the D edits min allows, not a pass over its words.
func EditSimilarityWords(wa, wb []string, min float64) float64 {
	n, m := len(wa), len(wb)
	if n+m == 0 {
		return 1
	}
	maxD, ok := editBudget(n, m, min)
	if !ok {
		return 0
	}
	d, ok := myers(wa, wb, maxD)
	if !ok {
		return 0
	}
	return 1 - float64(d)/float64(n+m)
}

// EditBudget returns the most word edits two texts of n and m words may be
// apart and still have an EditSimilarity of at least min, and false when
// their length difference alone costs more: EditSimilarity's early 0, so a
// caller that knows the word counts (WordCount) can skip the pair without
// cutting either text.
func EditBudget(n, m int, min float64) (int, bool) {
	if n+m == 0 {
		return 0, true
	}
	return editBudget(n, m, min)
}

// EditPrefixAllows reports whether a text of words a can be within maxD word
// edits of a text that starts with the words prefix, which must hold that
// text's first 2·maxD+1 words (or all of them). When it cannot, the pair's
// EditSimilarity at the min that gave maxD (EditBudget) is 0, so a caller
// comparing one text with many rules most of the far ones out by their
// first words (WordsPrefix). Within maxD edits at most maxD of a's words
// are deleted, so if a has more than maxD words one of a[0..maxD] is kept,
// matched to a word b[j] of the other text; the words before the two
// differ in number by |i−j|, each an edit, so j ≤ i+maxD ≤ 2·maxD.
func EditPrefixAllows(a, prefix []string, maxD int) bool {
	if len(a) <= maxD {
		return true
	}
	for i := 0; i <= maxD; i++ {
		for j := max(0, i-maxD); j <= i+maxD && j < len(prefix); j++ {
			if a[i] == prefix[j] {
				return true
			}
		}
	}
	return false
}

// WordsPrefix returns the first k of Words(s), all of them when s has fewer,
// normalising and cutting only the part of s they take. The cut falls on
// whitespace, which NFC never composes or reorders across, so the words are
// those Words(s) begins with.
func WordsPrefix(s string, k int) []string {
	n, in := 0, false
	for i := 0; i < len(s); {
		c := s[i]
		size, space := 1, false
		if c < utf8.RuneSelf {
			space = asciiSpace[c] != 0
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
		}
		if !space && !in {
			if n == k {
				return Words(s[:i])
			}
			n++
		}
		in = !space
		i += size
	}
	return Words(s)
}

// editBudget returns the most edits a pair of n and m words (n+m > 0) may
// have to score at least min, and false if their length difference alone
// is more.
func editBudget(n, m int, min float64) (int, bool) {
	if min < 0 {
		min = 0
	}
	// The epsilon keeps 1−0.9 = 0.0999… from losing an edit to rounding.
	maxD := int((1-min)*float64(n+m) + 1e-9)
	// The length difference alone costs |n−m| edits.
	if d := n - m; d > maxD || -d > maxD {
		return 0, false
	}
	return maxD, true
}

func editSimilarityWords(wa, wb []string, min float64) float64 {
	n, m := len(wa), len(wb)
	if n+m == 0 {
		return 1
	}
	maxD, ok := editBudget(n, m, min)
	if !ok {
		return 0
	}
	d, ok := editDistance(wa, wb, maxD)
	if !ok {
		return 0
	}
	return 1 - float64(d)/float64(n+m)
}

// editDistance returns the insert/delete distance of wa and wb if it is at
// most maxD, numbering the words so that they compare as integers.
func editDistance(wa, wb []string, maxD int) (int, bool) {
	// A common prefix and suffix are part of a longest common
	// subsequence: the distance is the middles', and a small edit of a
	// long text numbers only the words around it.
	wa, wb = trimCommon(wa, wb)
	ids := make(map[string]int32, len(wa))
	ia, ib := make([]int32, len(wa)), make([]int32, len(wb))
	for i, w := range wa {
		id, ok := ids[w]
		if !ok {
			id = int32(len(ids))
			ids[w] = id
		}
		ia[i] = id
	}
	for i, w := range wb {
		id, ok := ids[w]
		if !ok {
			id = -1 - int32(i) // absent from a: matches nothing
		}
		ib[i] = id
	}
	return myers(ia, ib, maxD)
}

// trimCommon returns a and b without their common prefix and suffix.
func trimCommon(a, b []string) ([]string, []string) {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	a, b = a[i:], b[i:]
	j := 0
	for j < len(a) && j < len(b) && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	return a[:len(a)-j], b[:len(b)-j]
}

// myers returns the insert/delete edit distance of a and b if it is at most
// maxD (E. Myers, "An O(ND) Difference Algorithm and Its Variations", 1986).
func myers[T comparable](a, b []T, maxD int) (int, bool) {
	n, m := len(a), len(b)
	if maxD > n+m {
		maxD = n + m
	}
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return d, true
			}
		}
	}
	return 0, false
}
