package pipeline

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDLQGuardWindowSlides(t *testing.T) {
	g := newDLQGuard(10, 0.5)
	cause := errors.New("bad row")
	for range 5 {
		require.NoError(t, g.deadLetter(cause))
	}
	// 5 of 10 is the limit, not over it; 10 good messages push them out.
	for range 10 {
		g.ok()
	}
	require.Zero(t, g.ratio())
	for range 5 {
		require.NoError(t, g.deadLetter(cause), "old dead letters left the window")
	}
	require.InDelta(t, 0.5, g.ratio(), 1e-9)
	err := g.deadLetter(cause)
	require.ErrorContains(t, err, "6 of the last 10 messages")
	require.ErrorIs(t, err, cause)
	require.Equal(t, err, g.Err(), "the guard stays tripped")
	g.ok()
	require.Equal(t, err, g.deadLetter(cause))
}

func TestDLQGuardRatioOneNeverTrips(t *testing.T) {
	g := newDLQGuard(3, 1)
	for range 10 {
		require.NoError(t, g.deadLetter(errors.New("x")))
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	err := Config{DeadLetterMaxRatio: 1.5, DeadLetterWindow: -1, MaxDocumentBytes: -1, EmbedSliceChunks: -2}.Validate()
	for _, field := range []string{"pipeline.dead_letter_max_ratio", "pipeline.dead_letter_window", "pipeline.max_document_bytes", "pipeline.embed_slice_chunks"} {
		require.ErrorContains(t, err, field)
	}
}

func TestTableForPrefersExactMatch(t *testing.T) {
	tables := []TableConfig{{Match: "public.*", Text: "glob"}, {Match: "public.docs", Text: "exact"}, {Match: "*", Text: "any"}}
	tests := []struct {
		table, want string
		ok          bool
	}{
		{"public.docs", "exact", true},
		{"public.notes", "glob", true},
		{"sales.orders", "any", true},
	}
	for _, tc := range tests {
		got, ok := tableFor(tables, tc.table)
		require.Equal(t, tc.ok, ok, tc.table)
		require.Equal(t, tc.want, got.Text, tc.table)
	}
	_, ok := tableFor(tables[:2], "sales.orders")
	require.False(t, ok)
}

func TestRenderLeavesOutLinesWithoutValues(t *testing.T) {
	tbl := TableConfig{Text: "# {{title}}\n\nBy {{author}}\n\n{{body}}"}
	require.Equal(t, "\nBy ann\n\nhello", tbl.render(map[string]any{"author": "ann", "body": "hello"}))
	require.Equal(t, "# T\n\n\nhello", tbl.render(map[string]any{"title": "T", "author": nil, "body": "hello"}))
}

func TestStripNUL(t *testing.T) {
	in := map[string]any{"a": "x\x00y", "b": []any{"ok", "n\x00"}, "c\x00": 1, "d": "clean"}
	out, n := stripNUL(in)
	require.Equal(t, 3, n)
	require.Equal(t, map[string]any{"a": "xy", "b": []any{"ok", "n"}, "c": 1, "d": "clean"}, out)
	require.Equal(t, "x\x00y", in["a"], "the input is not modified")
	same, n := stripNUL(map[string]any{"a": "clean"})
	require.Zero(t, n)
	require.Equal(t, map[string]any{"a": "clean"}, same)
}
