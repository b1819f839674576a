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
	_, err := st.Delete(ctx, "public.notes", "2", v(20), time.Time{})
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
			require.NotNil(t, m.Change, "the change is handed over built, not encoded")
			require.Nil(t, m.Value)
			got = append(got, *m.Change)
		}
	}
	require.Len(t, got, 3)
	require.Equal(t, int64(3), src.Read())
	require.Equal(t, cdc.OpRead, got[0].Op)
	snap := func(n uint64) cdc.Version { x := v(n); x.Snapshot = true; return x }
	require.Equal(t, snap(10), got[0].Version, "a stored document is read as a snapshot read at its version")
	require.Equal(t, json.Number("10000001"), got[0].After["id"], "integers stay integers")
	require.Equal(t, cdc.OpDelete, got[1].Op, "a tombstone is carried as a delete")
	require.Equal(t, snap(20), got[1].Version)
	require.Equal(t, "2", got[1].DocKey)
	require.Equal(t, "public.notes", got[2].Table)
}
