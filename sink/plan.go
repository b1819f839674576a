package sink

import (
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"slices"
)

// textMD5 matches Postgres's md5(text) for the same string.
func textMD5(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// storedChunk is a chunk row as Upsert reads it back.
type storedChunk struct {
	id       int64
	position int
	hash     string
	textMD5  string // md5 of the stored text, to spot a reformatting
}

// chunkMove rewrites a kept row: its position, and its text when the new
// text differs only in what normalisation ignores (whitespace, Unicode
// form). The vector stays: the normalised content, and so the hash, is equal.
type chunkMove struct {
	id       int64
	position int
	text     string
	tokens   int
}

// chunkPlan is how to turn the stored chunks into the wanted ones.
type chunkPlan struct {
	unchanged int
	moves     []chunkMove
	inserts   []Chunk
	removes   []int64
}

// planChunks diffs wanted against stored by content hash, as multisets: a
// stored chunk with the same hash, position and text is left alone (no
// write at all, so its row and HNSW entry stay); one with the same hash at
// another position, or whose text was only reformatted, is rewritten
// without its vector changing (the stored text must stay the source's, or
// the index would differ from a fresh load); a hash with no stored copy left is inserted
// and a stored copy nobody wants is removed. Repeated paragraphs (one hash
// at several positions) pair off one by one.
func planChunks(stored []storedChunk, wanted []Chunk) chunkPlan {
	type key struct {
		hash     string
		position int
	}
	exact := make(map[key]int, len(stored)) // -> index into stored
	for i, c := range stored {
		exact[key{c.hash, c.position}] = i
	}
	used := make([]bool, len(stored))
	var p chunkPlan
	var rest []Chunk
	for _, w := range wanted {
		if i, ok := exact[key{w.Hash, w.Position}]; ok && !used[i] {
			used[i] = true
			if stored[i].textMD5 != "" && stored[i].textMD5 != textMD5(w.Text) {
				p.moves = append(p.moves, chunkMove{id: stored[i].id, position: w.Position, text: w.Text, tokens: w.Tokens})
				continue
			}
			p.unchanged++
			continue
		}
		rest = append(rest, w)
	}

	// Leftover stored chunks by hash, in position order so the plan is
	// deterministic.
	byHash := make(map[string][]storedChunk)
	for i, c := range stored {
		if !used[i] {
			byHash[c.hash] = append(byHash[c.hash], c)
		}
	}
	for _, cs := range byHash {
		slices.SortFunc(cs, func(a, b storedChunk) int { return cmp.Compare(a.position, b.position) })
	}
	slices.SortFunc(rest, func(a, b Chunk) int { return cmp.Compare(a.Position, b.Position) })
	for _, w := range rest {
		if cs := byHash[w.Hash]; len(cs) > 0 {
			p.moves = append(p.moves, chunkMove{id: cs[0].id, position: w.Position, text: w.Text, tokens: w.Tokens})
			byHash[w.Hash] = cs[1:]
			continue
		}
		p.inserts = append(p.inserts, w)
	}
	for _, cs := range byHash {
		for _, c := range cs {
			p.removes = append(p.removes, c.id)
		}
	}
	slices.Sort(p.removes)
	return p
}
