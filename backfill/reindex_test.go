package backfill_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/sink"
)

func TestIndexSourceYieldsStoredDocumentsAtTheirVersions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	st := w.store("old", embedder.NewHashing(16))
	v := func(n uint64) cdc.Version { return cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{n}} }
	for i, id := range []string{"1", "2", "3"} {
		_, err := st.Upsert(ctx, sink.Document{Table: "public.notes", Key: id, Version: v(uint64(10 + i)),
			Row:    map[string]any{"id": json.Number("1000000" + id), "body": "note " + id},
			Chunks: []sink.Chunk{{Position: 0, Hash: "h" + id, Text: "note " + id, Tokens: 2, Vector: make([]float32, 16)}}})
		require.NoError(t, err)
	}
	deletedAt := time.UnixMilli(1_700_000_000_000).UTC()
	_, err := st.Delete(ctx, "public.notes", "2", v(20), deletedAt)
	require.NoError(t, err)

	src := backfill.NewIndexSource(sink.NewCatalog(w.ix, w.ixSchema), "old", 2)
	var got []cdc.Change
	for {
		b, err := src.Fetch(ctx)
		if err != nil {
			require.ErrorIs(t, err, errEOF)
			break
		}
		require.LessOrEqual(t, len(b.Records), 2, "pages of page-rows documents")
		for _, m := range b.Records {
			require.NotNil(t, m.Change, "the source hands over the change itself")
			require.Nil(t, m.Value, "no bytes to decode again")
			got = append(got, *m.Change)
		}
	}
	require.Len(t, got, 3)
	require.Equal(t, int64(3), src.Read())
	require.Equal(t, cdc.OpRead, got[0].Op)
	snap := func(v cdc.Version, ts uint64) cdc.Version { v.Snapshot, v.TS = true, ts; return v }
	require.Equal(t, snap(v(10), 0), got[0].Version, "a stored document is a snapshot read at its stored version")
	require.Equal(t, json.Number("10000001"), got[0].After["id"], "integers stay integers")
	require.Equal(t, cdc.OpDelete, got[1].Op, "a tombstone is carried as a delete")
	require.Nil(t, got[1].After)
	require.Equal(t, snap(v(20), uint64(deletedAt.UnixMilli())), got[1].Version, "the commit time the index kept goes in the version")
	require.Equal(t, "2", got[1].DocKey)
	require.Equal(t, "public.notes", got[2].Table)
	require.Equal(t, "ragsync-reindex.old", got[2].Coord.Topic)
}
