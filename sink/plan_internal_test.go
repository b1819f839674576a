package sink

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlanChunks(t *testing.T) {
	sc := func(id int64, pos int, h string) storedChunk { return storedChunk{id: id, position: pos, hash: h} }
	ch := func(pos int, h string) Chunk { return Chunk{Position: pos, Hash: h} }
	mv := func(id int64, pos int) chunkMove { return chunkMove{id: id, position: pos} }
	tests := []struct {
		name      string
		stored    []storedChunk
		wanted    []Chunk
		unchanged int
		moves     []chunkMove
		inserts   []string // hashes
		removes   []int64
	}{
		{name: "new document", wanted: []Chunk{ch(0, "a"), ch(1, "b")}, inserts: []string{"a", "b"}},
		{name: "identical", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "b")}, wanted: []Chunk{ch(0, "a"), ch(1, "b")}, unchanged: 2},
		{name: "edit one", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "b")}, wanted: []Chunk{ch(0, "a"), ch(1, "c")},
			unchanged: 1, inserts: []string{"c"}, removes: []int64{2}},
		{name: "insert at front shifts others", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "b")},
			wanted: []Chunk{ch(0, "x"), ch(1, "a"), ch(2, "b")},
			moves:  []chunkMove{mv(1, 1), mv(2, 2)}, inserts: []string{"x"}},
		{name: "swap", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "b")}, wanted: []Chunk{ch(0, "b"), ch(1, "a")},
			moves: []chunkMove{mv(2, 0), mv(1, 1)}},
		{name: "remove all", stored: []storedChunk{sc(2, 1, "b"), sc(1, 0, "a")}, removes: []int64{1, 2}},
		{name: "repeated paragraph pairs off", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "a"), sc(3, 2, "b")},
			wanted:    []Chunk{ch(0, "a"), ch(1, "b"), ch(2, "a"), ch(3, "a")},
			unchanged: 1, moves: []chunkMove{mv(3, 1), mv(2, 2)}, inserts: []string{"a"}},
		{name: "reformatted text is rewritten in place, vector kept",
			stored:    []storedChunk{{id: 1, position: 0, hash: "a", textMD5: textMD5("a  b")}, {id: 2, position: 1, hash: "c", textMD5: textMD5("")}},
			wanted:    []Chunk{{Position: 0, Hash: "a", Text: "a b", Tokens: 2}, ch(1, "c")},
			unchanged: 1, moves: []chunkMove{{id: 1, position: 0, text: "a b", tokens: 2}}},
		{name: "one copy of repeat vanishes", stored: []storedChunk{sc(1, 0, "a"), sc(2, 1, "a")}, wanted: []Chunk{ch(0, "a")},
			unchanged: 1, removes: []int64{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planChunks(tc.stored, tc.wanted)
			require.Equal(t, tc.unchanged, p.unchanged, "unchanged")
			require.Equal(t, tc.moves, p.moves, "moves")
			var ins []string
			for _, c := range p.inserts {
				ins = append(ins, c.Hash)
			}
			require.Equal(t, tc.inserts, ins, "inserts")
			require.Equal(t, tc.removes, p.removes, "removes")
			// Every wanted chunk is accounted for exactly once.
			require.Equal(t, len(tc.wanted), p.unchanged+len(p.moves)+len(p.inserts))
			require.Equal(t, len(tc.stored), p.unchanged+len(p.moves)+len(p.removes))
		})
	}
}
