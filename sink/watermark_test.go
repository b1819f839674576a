package sink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

func TestWatermarkNeverMovesBack(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	save := func(off int64, through time.Time) {
		t.Helper()
		require.NoError(t, s.SaveMarks(ctx, []cdc.Mark{cdc.OffsetMark("kafka:g", "t", 0, off, through, through, false)}))
	}
	save(10, t0.Add(10*time.Second))
	// A replica that lost the partition writes what it had: nothing moves.
	save(7, t0.Add(7*time.Second))
	got, err := s.Watermarks(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "t/0/10", got[0].Position)
	require.True(t, got[0].Through.Equal(t0.Add(10*time.Second)), "through %s", got[0].Through)
	require.NotEmpty(t, got[0].Writer)
	save(12, t0.Add(12*time.Second))
	got, err = s.Watermarks(ctx)
	require.NoError(t, err)
	require.Equal(t, "t/0/12", got[0].Position)

	// The view gives the index's time watermark and, for one lane, its
	// position; an LSN casts to pg_lsn for an application's comparison.
	require.NoError(t, s.SaveMarks(ctx, []cdc.Mark{cdc.LSNMark("pg:1/app", 0x1_0000_0010, t0, t0, true)}))
	var passed bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT position::pg_lsn >= '1/10'::pg_lsn FROM `+b.schema+`.watermark WHERE index_name = 'articles' AND kind = 'lsn'`).Scan(&passed))
	require.True(t, passed)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT position::pg_lsn >= '1/11'::pg_lsn FROM `+b.schema+`.watermark WHERE index_name = 'articles' AND kind = 'lsn'`).Scan(&passed))
	require.False(t, passed)
}

func TestWaitAfterWakesOnTheWriteAndSaysNotYetOtherwise(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	after, err := cdc.ParseAfter("0/500")
	require.NoError(t, err)

	// Nothing written: not yet, with what holds it.
	err = s.WaitAfter(ctx, after, 200*time.Millisecond)
	var ny *sink.NotYetError
	require.ErrorAs(t, err, &ny)
	require.True(t, errors.Is(err, sink.ErrNotYet))
	require.Contains(t, ny.Why, "no watermark")
	require.GreaterOrEqual(t, ny.Waited, 200*time.Millisecond)

	require.NoError(t, s.SaveMarks(ctx, []cdc.Mark{cdc.LSNMark("pg:1/app", 0x400, time.Time{}, time.Time{}, false)}))
	err = s.WaitAfter(ctx, after, 0)
	require.ErrorAs(t, err, &ny)
	require.True(t, strings.Contains(ny.Why, "0/400"), ny.Why)

	// A waiter wakes when the mark is written, well before its timeout
	// (a notification, not the one-second poll).
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.WaitAfter(ctx, after, 30*time.Second) }()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, s.SaveMarks(ctx, []cdc.Mark{cdc.LSNMark("pg:1/app", 0x500, time.Time{}, time.Time{}, false)}))
	select {
	case err := <-done:
		require.NoError(t, err)
		require.Less(t, time.Since(start), 10*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not wake")
	}
	// A cancelled wait returns the context's error, not "not yet".
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	far, _ := cdc.ParseAfter("9/0")
	err = s.WaitAfter(cctx, far, time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, sink.ErrNotYet), "%v", err)
}

func TestSaveMarksRefusedReadOnly(t *testing.T) {
	_, b := setup(t)
	r, err := sink.OpenIndex(context.Background(), b.pool, sink.Config{Mode: sink.Read, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	err = r.SaveMarks(context.Background(), []cdc.Mark{cdc.LineMark("file:/x", 1, time.Time{}, time.Time{}, false)})
	require.ErrorIs(t, err, sink.ErrReadOnly)
}
