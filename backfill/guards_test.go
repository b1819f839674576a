package backfill_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/sink"
)

// A checkpoint is a position in one keyset under one condition: resuming
// with other key columns or another --where is refused, and the error says
// what differs, instead of reading from a position that means nothing.
func TestResumeRefusesACheckpointOfAnotherRun(t *testing.T) {
	w := newWorld(t)
	w.seed(12)
	ctx := context.Background()
	require.NoError(t, ensureIndex(w, "articles"))
	cp := sink.NewCheckpoints(w.ix, w.ixSchema, "articles")
	src, err := backfill.Open(ctx, w.config(5), cp)
	require.NoError(t, err)
	b, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.NoError(t, b.Ack(ctx))
	src.Close()

	for _, tc := range []struct {
		name  string
		table backfill.Table
		want  string
	}{
		{"other key columns", backfill.Table{Name: w.table(), ID: []string{"title"}}, "key columns (id) then, (title) now"},
		{"a --where added", backfill.Table{Name: w.table(), Where: "t.id > 2"}, `--where (none) then, "t.id > 2" now`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := w.config(5)
			cfg.Tables, cfg.Resume = []backfill.Table{tc.table}, true
			_, err := backfill.Open(ctx, cfg, cp)
			require.ErrorContains(t, err, "the checkpoint does not belong to this run: "+tc.want)
			require.ErrorContains(t, err, "run without --resume")
		})
	}
	// The same run resumes.
	cfg := w.config(5)
	cfg.Resume = true
	src, err = backfill.Open(ctx, cfg, cp)
	require.NoError(t, err)
	require.Len(t, fetchAll(t, src), 7)
	src.Close()
}

// A --where is checked before anything is read: it must stay inside its
// parentheses (or it would rewrite the keyset condition and re-read one
// page for ever) and be one boolean expression without parameters.
func TestWhereMustBeOneBooleanExpression(t *testing.T) {
	w := newWorld(t)
	w.seed(6)
	ctx := context.Background()
	for _, tc := range []struct {
		where, wantErr string
	}{
		{"t.id > 2) OR (true", `closes a parenthesis the condition did not open`},
		{"(t.id > 2", `are never closed`},
		{"t.id > 2; DELETE FROM x", `contains ";"`},
		{"t.id > 2 -- ignore the rest", `contains a comment`},
		{"t.id > 2 /* x", `contains a comment`},
		{"t.id + 1", `it is of type int4, not boolean`},
		{"t.id > $1", `it has parameters`},
		{"t.title = 'unterminated", `unterminated '`},
		{"t.nope > 1", `column t.nope does not exist`},
		{"t.id > 2 AND t.title <> ')' AND t.body <> $$(;--$$ AND t.title <> E'\\')'", ""},
	} {
		t.Run(tc.where, func(t *testing.T) {
			cfg := w.config(5)
			cfg.Tables = []backfill.Table{{Name: w.table(), Where: tc.where}}
			src, err := backfill.Open(ctx, cfg, nil)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, fetchAll(t, src), 4)
				src.Close()
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, "it must be one boolean expression over the table's columns")
		})
	}
}

// --rate holds per row, not per page: 60 rows at 40 rows/s take about 1.5 s
// even though they fit one page of 500 (read at once, the page used to pass
// in one burst).
func TestRateHoldsPerRow(t *testing.T) {
	w := newWorld(t)
	w.seed(60)
	cfg := w.config(500)
	cfg.Rate = 40
	src, err := backfill.Open(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	start := time.Now()
	require.Len(t, fetchAll(t, src), 60)
	// 60 rows at 40/s: at least 1.5 s, with no burst allowance.
	require.GreaterOrEqual(t, time.Since(start), 1400*time.Millisecond)
}
