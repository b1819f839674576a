package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
)

func strp(s string) *string { return &s }

func TestDecodeEvents(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int
		want    int
		wantErr string
	}{
		{name: "all", in: `{"seq":1,"commit":"c1","ts":"2024-01-01T00:00:00Z","doc_id":"a.md","op":"r","body":"x"}
{"seq":2,"commit":"c2","ts":"2024-01-02T00:00:00Z","doc_id":"a.md","op":"d","body":null}
`, want: 2},
		{name: "limit", in: `{"seq":1,"commit":"c1","ts":"2024-01-01T00:00:00Z","doc_id":"a.md","op":"r","body":"x"}
{"seq":2,"commit":"c2","ts":"2024-01-02T00:00:00Z","doc_id":"a.md","op":"u","body":"y"}
`, limit: 1, want: 1},
		{name: "not JSON", in: "{nope\n", wantErr: "decode event line 1"},
		{name: "update without body", in: `{"seq":7,"doc_id":"a.md","op":"u","body":null}` + "\n", wantErr: "event 7 (u a.md): no body"},
		{name: "unknown op", in: `{"seq":3,"doc_id":"a.md","op":"x"}` + "\n", wantErr: `unknown op "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := decodeEvents(strings.NewReader(tc.in), tc.limit)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, evs, tc.want)
		})
	}
}

// TestToLinesDecode feeds the synthetic messages to the real decoder: each
// must come out as the change it stands for, with versions increasing
// across the initial load and the updates, and the delete's tombstone
// skipped as Debezium's are.
func TestToLinesDecode(t *testing.T) {
	evs := []event{
		{Seq: 1, Commit: "base", TS: "2024-01-01T10:00:00+01:00", DocID: "docs/a.md", Op: "r", Body: strp("# A\n\nfirst")},
		{Seq: 2, Commit: "base", TS: "2024-01-01T10:00:00+01:00", DocID: "docs/b.md", Op: "r", Body: strp("# B")},
		{Seq: 3, Commit: "c1", TS: "2024-01-02T10:00:00Z", DocID: "docs/a.md", Op: "u", Body: strp("# A\n\nsecond \"quoted\" ü")},
		{Seq: 4, Commit: "c2", TS: "2024-01-03T10:00:00Z", DocID: "docs/b.md", Op: "d"},
		{Seq: 5, Commit: "c2", TS: "2024-01-03T10:00:00Z", DocID: "docs/c.md", Op: "c", Body: strp("")},
	}
	initLines, err := toLines(evs[:2], 0)
	require.NoError(t, err)
	updLines, err := toLines(evs[2:], 2)
	require.NoError(t, err)
	require.Len(t, initLines, 2)
	require.Len(t, updLines, 4, "the delete is followed by a tombstone")

	dec := cdc.NewDecoder(cdc.DecoderConfig{})
	var changes []cdc.Change
	skipped := 0
	for i, line := range append(append([][]byte{}, initLines...), updLines...) {
		ch, err := dec.Decode(file.ParseLine(line, int64(i+1)))
		if errors.Is(err, cdc.ErrSkip) {
			skipped++
			continue
		}
		require.NoError(t, err, "line %d: %s", i+1, line)
		changes = append(changes, ch)
	}
	require.Equal(t, 1, skipped)
	require.Len(t, changes, len(evs))
	for i, ch := range changes {
		e := evs[i]
		require.Equal(t, cdc.Op(e.Op), ch.Op, "event %d", e.Seq)
		require.Equal(t, benchTable, ch.Table)
		require.Equal(t, e.DocID, ch.DocKey)
		require.Equal(t, cdc.KindPostgres, ch.Version.Kind)
		if i > 0 {
			require.Positive(t, ch.Version.Compare(changes[i-1].Version), "versions must increase: event %d", e.Seq)
		}
		if e.Op == "d" {
			require.Nil(t, ch.After)
			continue
		}
		require.Equal(t, *e.Body, ch.After["body"])
	}
	require.True(t, changes[0].Version.Snapshot)
	require.False(t, changes[2].Version.Snapshot)
	require.Equal(t, "2024-01-01T09:00:00Z", changes[0].Version.Time().UTC().Format("2006-01-02T15:04:05Z"))
}

func TestToLinesBadTimestamp(t *testing.T) {
	_, err := toLines([]event{{Seq: 9, TS: "yesterday", DocID: "a", Op: "c", Body: strp("x")}}, 0)
	require.ErrorContains(t, err, "event 9: ts")
}

func TestMemSource(t *testing.T) {
	lines := [][]byte{[]byte(`{"topic":"t","key":{"id":1},"value":null}`), []byte(`{}`), []byte(`{}`)}
	src := newMemSource(lines, 2)
	ctx := context.Background()
	b, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Len(t, b.Records, 2)
	require.Equal(t, "t", b.Records[0].Topic)
	require.Equal(t, int64(2), b.Records[1].Offset)
	b, err = src.Fetch(ctx)
	require.NoError(t, err)
	require.Len(t, b.Records, 1)
	require.Equal(t, int64(3), b.Records[0].Offset)
	_, err = src.Fetch(ctx)
	require.ErrorIs(t, err, io.EOF)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = newMemSource(lines, 2).Fetch(cctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestFinalState(t *testing.T) {
	evs := []event{
		{DocID: "a", Op: "r", Body: strp("a1")},
		{DocID: "b", Op: "r", Body: strp("b1")},
		{DocID: "a", Op: "u", Body: strp("a2")},
		{DocID: "b", Op: "d"},
		{DocID: "c", Op: "c", Body: strp("c1")},
		{DocID: "c", Op: "d"},
		{DocID: "c", Op: "c", Body: strp("c2")},
	}
	require.Equal(t, map[string]string{"a": "a2", "c": "c2"}, finalState(evs))
}

func TestSampleDocs(t *testing.T) {
	var evs []event
	for i := range 2000 {
		id := "doc" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
		evs = append(evs, event{Seq: int64(i), DocID: id, Op: "r"}, event{Seq: int64(i + 5000), DocID: id, Op: "u"})
	}
	require.Equal(t, evs, sampleDocs(evs, 1))
	require.Equal(t, evs, sampleDocs(evs, 0))
	got := sampleDocs(evs, 0.25)
	require.InDelta(t, len(evs)/4, len(got), float64(len(evs))/20, "about a quarter of the events")
	perDoc := map[string]int{}
	j := 0
	for _, e := range got {
		perDoc[e.DocID]++
		for j < len(evs) && evs[j] != e {
			j++
		}
		require.Less(t, j, len(evs), "the sample keeps the history's order")
		j++
	}
	for id, n := range perDoc {
		require.Equal(t, 2, n, "document %s keeps its whole history", id)
	}
	require.Equal(t, got, sampleDocs(evs, 0.25), "deterministic")
}
