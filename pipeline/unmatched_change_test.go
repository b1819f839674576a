package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// A source that builds changes itself (the Postgres source) hands over a
// change of a published table that tables[] does not match with its table
// only: no document id (the table may have no key at all) and no row. The
// pipeline counts each unmatched_table and dead-letters none of them.
func TestBuiltChangesOfUnmatchedTablesAreCounted(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	st, err := sink.New(t.Context(), pool, sink.Config{Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	dlq := &memDLQ{}
	b := bundle{store: st, emb: &countingEmbedder{}, dlq: dlq}
	built := func(op cdc.Op, lsn uint64) cdc.Record {
		ch := cdc.Change{Table: "public.audit", Op: op,
			Version: cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{lsn, 0}, TS: cdc.VersionTS(time.Now())},
			Coord:   cdc.Coord{Offset: int64(lsn)}}
		return cdc.Record{Raw: cdc.Raw{Offset: int64(lsn)}, Change: &ch}
	}
	src := &sliceSource{batches: [][]cdc.Record{{
		event("c", 1, 10, paraA),
		built(cdc.OpCreate, 11),
		built(cdc.OpUpdate, 12),
		built(cdc.OpDelete, 13),
		built(cdc.OpTruncate, 14),
	}}}
	p := b.newPipeline(t, src, pipeline.Config{Tables: []pipeline.TableConfig{{Match: "public.docs"}}}, nil)
	require.NoError(t, p.Run(t.Context()))
	require.Equal(t, 4, p.Stats()["unmatched_table"], "create, update, delete and truncate of public.audit")
	require.Zero(t, p.Stats()["dead_lettered"])
	dlq.mu.Lock()
	require.Empty(t, dlq.letters)
	dlq.mu.Unlock()
	_, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, int32(1), src.acked.Load(), "the batch is acknowledged")
}
