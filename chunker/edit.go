package chunker

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MethodWords names ChunkEditSimilarity's measure, as DocSimilarity names
// its own.
const MethodWords = "words"

// Piece is one chunk of a document as ChunkEditSimilarity reads it: its
// text and its content hash (Hash of the text).
type Piece struct {
	Hash, Text string
}

// editCapWords bounds the word edit distance ChunkEditSimilarity computes
// exactly: past it, the changed parts count as having no word in common,
// which understates the similarity of a large edit and never overstates
// it. Myers's search costs about D² steps for a distance D; at a cap of
// 2,000 a rewritten 4 KB document cost 1.7 ms of CPU
// (BenchmarkChunkEditSimilarityRewrite), a third of the process's CPU in
// the freshness bench's rate curve, for a figure that
// decides nothing: it is the edit-similarity metric and the documents
// row's column. At 128 the same rewrite costs 0.18 ms, most of it cutting
// the changed text into words, which grows with the edit; an edit of up
// to 64 words out and 64 in (a paragraph) is still measured exactly.
const editCapWords = 128

// ChunkEditSimilarity scores how similar two versions of a document are,
// 0 (rewritten) to 100 (same), from their chunks in document order: 100 ×
// (1 − D/(n+m)), where n and m are the versions' word counts and D the
// word insert/delete edit distance between the chunks whose content hash
// the other version lacks (EditSimilarity's measure, restricted to what
// changed). Chunks with equal hashes hold equal normalised words, so only
// the changed chunks are normalised and compared: the work grows with the
// edit, not with the document (the rest is a word count). D is an upper
// bound of the whole texts' distance (a word that moved between a kept
// and a changed chunk counts as an edit), so the score never overstates
// the similarity.
func ChunkEditSimilarity(old, new []Piece) int {
	left := make(map[string]int, len(old))
	for _, p := range old {
		left[p.Hash]++
	}
	var n, m int
	var added, removed strings.Builder
	kept := make(map[string]int, len(new))
	for _, p := range new {
		w := countWords(p.Text)
		m += w
		if left[p.Hash] > 0 {
			left[p.Hash]--
			kept[p.Hash]++
			// The old chunk of the same hash has the same words: the
			// old version's unchanged text is not read again.
			n += w
			continue
		}
		added.WriteString(p.Text)
		added.WriteByte(' ')
	}
	for _, p := range old {
		if kept[p.Hash] > 0 {
			kept[p.Hash]--
			continue
		}
		n += countWords(p.Text)
		removed.WriteString(p.Text)
		removed.WriteByte(' ')
	}
	if n+m == 0 {
		return 100
	}
	// The changed texts share all but the edit: only their middles, cut
	// at whitespace, are cut into words; the common ends are counted.
	r, a := removed.String(), added.String()
	pre, suf := commonEnds(r, a)
	ends := countWords(r[:pre]) + countWords(r[len(r)-suf:])
	wa, wb := Words(r[pre:len(r)-suf]), Words(a[pre:len(a)-suf])
	na, nb := ends+len(wa), ends+len(wb)
	d := na + nb
	if d > 0 {
		min := 1 - float64(editCapWords)/float64(d)
		// editSimilarityWords of the whole word lists: the common ends
		// are part of a longest common subsequence.
		if maxD, ok := editBudget(na, nb, min); ok {
			if dist, ok := editDistance(wa, wb, maxD); ok {
				if sim := 1 - float64(dist)/float64(d); sim > 0 {
					// Rounded: sim is 1 − D/d, computed in floating point.
					d = int(float64(d)*(1-sim) + 0.5)
				}
			}
		}
	}
	return int(100*(1-float64(d)/float64(n+m)) + 0.5)
}

// commonEnds returns the byte lengths of a common prefix and a common
// suffix of a and b that do not overlap in either and are cut at ASCII
// whitespace: the prefix ends with it and the suffix starts with it (or
// they are empty). NFC never composes or reorders across whitespace, so
// the words of a are those of its prefix, its middle and its suffix.
func commonEnds(a, b string) (pre, suf int) {
	limit := min(len(a), len(b))
	p := 0
	for p < limit && a[p] == b[p] {
		p++
	}
	for p > 0 && (a[p-1] >= utf8.RuneSelf || asciiSpace[a[p-1]] == 0) {
		p--
	}
	limit -= p
	q := 0
	for q < limit && a[len(a)-1-q] == b[len(b)-1-q] {
		q++
	}
	for q > 0 && (a[len(a)-q] >= utf8.RuneSelf || asciiSpace[a[len(a)-q]] == 0) {
		q--
	}
	return p, q
}

// countWords counts the words of s as strings.Fields would (NFC does not
// change where Unicode whitespace is), without allocating.
func countWords(s string) int {
	n := 0
	// prev is 1 after whitespace (and at the start): a non-space byte
	// there starts a word. ASCII is counted without branches.
	prev := uint8(1)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			sp := asciiSpace[c]
			n += int(prev &^ sp)
			prev = sp
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		sp := uint8(0)
		if unicode.IsSpace(r) {
			sp = 1
		}
		n += int(prev &^ sp)
		prev = sp
		i += size
	}
	return n
}

// asciiSpace marks the ASCII bytes unicode.IsSpace accepts.
var asciiSpace = [utf8.RuneSelf]uint8{'\t': 1, '\n': 1, '\v': 1, '\f': 1, '\r': 1, ' ': 1}
