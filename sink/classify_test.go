package sink_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// TestDataErrorsArePermanent: rows Postgres rejects for their data come
// back as permanent errors, which callers dead-letter without retrying.
func TestDataErrorsArePermanent(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	tests := []struct {
		name string
		doc  sink.Document
		code string
	}{
		{"NUL in the key (22021)", doc("a\x00b", 1, chunks("h1")), "22021"},
		{"NUL escape in the row's jsonb (22P05)", func() sink.Document {
			d := doc("k2", 1, chunks("h2"))
			d.Row = map[string]any{"body": "x\x00y"}
			return d
		}(), "22P05"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Upsert(ctx, tc.doc)
			require.ErrorContains(t, err, "SQLSTATE "+tc.code)
			var de *sink.DataError
			require.ErrorAs(t, err, &de)
			var p interface{ Permanent() bool }
			require.True(t, errors.As(err, &p) && p.Permanent())
			require.False(t, sink.Retryable(err))
			require.False(t, sink.Fatal(err))
		})
	}
}

// TestDroppedTableIsFatal: a table dropped under a running index is a
// FatalError naming the fix (a lost privilege, 42501, is exercised by
// pipeline's TestRevokeMidRunStops).
func TestDroppedTableIsFatal(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "DROP TABLE "+b.schema+".truncations")
	require.NoError(t, err)
	_, err = s.Truncate(ctx, "public.articles", ver(5), time.Time{})
	require.Error(t, err)
	require.True(t, sink.Fatal(err), "%v", err)
	require.ErrorContains(t, err, "SQLSTATE 42P01")
	require.ErrorContains(t, err, "ragsync migrate")
	var p interface{ Permanent() bool }
	require.False(t, errors.As(err, &p), "fatal, not a per-row permanent failure")
}

// TestCacheVectors: vectors cached ahead of an upsert are what the upsert
// stores for chunks that come without one.
func TestCacheVectors(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	require.NoError(t, s.CacheVectors(ctx, []string{"h2", "h1", "h2"}, []string{"t2", "t1", "t2"}, [][]float32{vecFor("h2"), vecFor("h1"), vecFor("h2")}, ""))
	got, err := s.Vectors(ctx, []string{"h1", "h2"})
	require.NoError(t, err)
	require.Equal(t, vecFor("h1"), got["h1"])
	require.Equal(t, vecFor("h2"), got["h2"])
	have, err := s.Cached(ctx, []string{"h1", "h2", "h9"})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"h1": true, "h2": true}, have)
	cs := chunks("h1", "h2")
	for i := range cs {
		cs[i].Vector = nil
	}
	out, err := s.Upsert(ctx, doc("k", 1, cs))
	require.NoError(t, err)
	require.Equal(t, 2, out.Inserted)

	err = s.CacheVectors(ctx, []string{"h3"}, []string{"t3"}, [][]float32{{1, 2}}, "")
	require.ErrorIs(t, err, sink.ErrInvalidDocument, "wrong dimensions are refused")
	err = s.CacheVectors(ctx, []string{"h3"}, nil, [][]float32{vecFor("h3")}, "")
	require.ErrorIs(t, err, sink.ErrInvalidDocument, "mismatched lengths are refused")
}
