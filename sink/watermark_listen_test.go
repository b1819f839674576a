package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// ListenMarks is called back once when it listens and at each write of
// this index's watermark, not another index's, and ends with its context.
func TestListenMarksCallsBackOnThisIndexWrites(t *testing.T) {
	s, b := setup(t)
	other, err := sink.OpenIndex(context.Background(), b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "other", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ListenMarks(ctx, func() { changed <- struct{}{} }) }()
	next := func() bool {
		select {
		case <-changed:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	require.True(t, next(), "a call once listening")
	mark := func(st *sink.Store, lsn uint64) {
		require.NoError(t, st.SaveMarks(context.Background(), []cdc.Mark{cdc.LSNMark("pg", lsn, time.Time{}, time.Time{}, false)}))
	}
	mark(other, 0x10)
	mark(s, 0x10)
	require.True(t, next(), "a call for this index's write")
	select {
	case <-changed:
		t.Fatal("called for another index's write too")
	default:
	}
	cancel()
	err = <-done
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
