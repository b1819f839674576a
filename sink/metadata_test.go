package sink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// metadataDoc is a metadata-only update of key at version v, decided by
// render hash rh.
func metadataDoc(key string, v uint64, rh string, md map[string]any) sink.Document {
	d := doc(key, v, nil)
	d.Metadata, d.RenderHash, d.MetadataOnly = md, rh, true
	return d
}

// storedMetadata is the document row's metadata, version and render hash.
func storedMetadata(t *testing.T, b *testBundle, id string) (map[string]any, string, string) {
	t.Helper()
	var md map[string]any
	var version, rh string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		fmt.Sprintf("SELECT metadata, version, coalesce(render_hash, '') FROM %s.documents WHERE id = $1", b.schema), id).Scan(&md, &version, &rh))
	return md, version, rh
}

// A metadata-only write changes the document row and nothing else: the
// chunk rows keep their row versions (no UPDATE reached them), and a
// search filtered by the new metadata finds them at once. It is fenced
// like any write, and refused (TextChanged, nothing written) when the
// stored text is not the one it was decided by: another render hash, a
// deleted document, or none at all. Both the grouped and the lone
// transaction take the same path.
func TestMetadataOnlyWritesTheDocumentRowAlone(t *testing.T) {
	for _, group := range []int{32, 1} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) {
			ctx := context.Background()
			_, b := setup(t)
			s, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles",
				Model: "test-model", Dimensions: dims, GroupDocuments: group})
			require.NoError(t, err)

			d := doc("1", 10, chunks("a", "b"))
			d.RenderHash = "rh-1"
			out, err := s.Upsert(ctx, d)
			require.NoError(t, err)
			require.True(t, out.Applied)
			before := chunkRows(t, b, "public.articles/1")

			out, err = s.Upsert(ctx, metadataDoc("1", 11, "rh-1", map[string]any{"semantic_tag": "faq"}))
			require.NoError(t, err)
			require.Equal(t, sink.Outcome{Applied: true, MetadataOnly: true}, out)
			require.Equal(t, before, chunkRows(t, b, "public.articles/1"), "a metadata-only write must not touch a chunk row")
			md, version, rh := storedMetadata(t, b, "public.articles/1")
			require.Equal(t, map[string]any{"semantic_tag": "faq"}, md)
			require.Equal(t, ver(11).String(), version)
			require.Equal(t, "rh-1", rh)
			hits, err := s.Search(ctx, vecFor("a"), sink.Query{K: 5, Filter: map[string]any{"semantic_tag": "faq"}})
			require.NoError(t, err)
			require.Len(t, hits, 2)

			// Fenced: an older or equal version writes nothing.
			out, err = s.Upsert(ctx, metadataDoc("1", 9, "rh-1", map[string]any{"semantic_tag": "old"}))
			require.NoError(t, err)
			require.True(t, out.Stale)
			out, err = s.Upsert(ctx, metadataDoc("1", 11, "rh-1", map[string]any{"semantic_tag": "dup"}))
			require.NoError(t, err)
			require.True(t, out.Duplicate)
			md, _, _ = storedMetadata(t, b, "public.articles/1")
			require.Equal(t, "faq", md["semantic_tag"])

			// Refused: the text it was decided by is not the stored one.
			out, err = s.Upsert(ctx, metadataDoc("1", 12, "rh-other", map[string]any{"semantic_tag": "x"}))
			require.NoError(t, err)
			require.Equal(t, sink.Outcome{TextChanged: true}, out)
			out, err = s.Upsert(ctx, metadataDoc("2", 12, "rh-1", map[string]any{"semantic_tag": "x"}))
			require.NoError(t, err)
			require.Equal(t, sink.Outcome{TextChanged: true}, out, "a document the index does not hold has no text to keep")
			_, err = s.Delete(ctx, "public.articles", "1", ver(13), docTime)
			require.NoError(t, err)
			out, err = s.Upsert(ctx, metadataDoc("1", 14, "rh-1", map[string]any{"semantic_tag": "x"}))
			require.NoError(t, err)
			require.Equal(t, sink.Outcome{TextChanged: true}, out, "a deleted document's chunks are gone")
			md, version, _ = storedMetadata(t, b, "public.articles/1")
			require.Equal(t, "faq", md["semantic_tag"])
			require.Equal(t, ver(13).String(), version)
		})
	}
}

func TestMetadataOnlyNeedsItsRenderHashAndNoChunks(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t)
	d := metadataDoc("1", 1, "", nil)
	_, err := s.Upsert(ctx, d)
	require.ErrorIs(t, err, sink.ErrInvalidDocument)
	d = metadataDoc("1", 1, "rh", nil)
	d.Chunks = chunks("a")
	_, err = s.Upsert(ctx, d)
	require.ErrorIs(t, err, sink.ErrInvalidDocument)
}

// provenanceRow is a chunk row's provenance columns, "" (or zero) for NULL.
type provenanceRow struct {
	Hash, ModelVersion, Chunker, Source, Position, TraceID string
	Committed                                              time.Time
}

func provenanceRows(t *testing.T, b *testBundle, id string) map[string]provenanceRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), fmt.Sprintf("SELECT content_hash, coalesce(model_version, ''), coalesce(chunker, ''),"+
		" coalesce(source, ''), coalesce(source_position, ''), coalesce(trace_id, ''), coalesce(committed_at, 'epoch')"+
		" FROM %s.chunks WHERE doc_id = $1", b.schema), id)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]provenanceRow{}
	for rows.Next() {
		var r provenanceRow
		require.NoError(t, rows.Scan(&r.Hash, &r.ModelVersion, &r.Chunker, &r.Source, &r.Position, &r.TraceID, &r.Committed))
		out[r.Hash] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// Every chunk row a write inserts records the write's provenance: a chunk
// that carries its vector the document's model version, one whose vector
// comes from the cache the cache entry's. Kept chunks keep the provenance
// of the change that wrote them; the bulk load records the same.
func TestChunkRowsRecordProvenance(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"write", "bulk"} {
		t.Run(mode, func(t *testing.T) {
			_, b := setup(t)
			m := sink.Write
			if mode == "bulk" {
				m = sink.Bulk
			}
			s, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: m, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
			require.NoError(t, err)
			// "c" is cached by another writer, under another model version.
			require.NoError(t, s.CacheVectors(ctx, []string{"c"}, []string{"text of c"}, [][]float32{vecFor("c")}, "model-2024"))

			v1 := cdc.Version{Kind: "pg", Parts: []uint64{10}, TS: uint64(docTime.UnixMilli()), Source: "pg:7/app"}
			d := doc("1", 0, chunks("a", "b", "c"))
			d.Chunks[2].Vector = nil
			d.Version = v1
			d.Provenance = sink.Provenance{ModelVersion: "model-2025", Chunker: "greedy/64/16/128", TraceID: "0123456789abcdef0123456789abcdef"}
			_, err = s.Upsert(ctx, d)
			require.NoError(t, err)
			require.NoError(t, s.Flush(ctx))

			got := provenanceRows(t, b, "public.articles/1")
			want := provenanceRow{ModelVersion: "model-2025", Chunker: "greedy/64/16/128", Source: "pg:7/app",
				Position: v1.Position(), TraceID: "0123456789abcdef0123456789abcdef", Committed: docTime}
			for _, h := range []string{"a", "b"} {
				w := want
				w.Hash = h
				require.Equal(t, w, normal(got[h]), h)
			}
			w := want
			w.Hash, w.ModelVersion = "c", "model-2024"
			require.Equal(t, w, normal(got["c"]), "a cached vector records the cache entry's model version")
			if mode == "bulk" {
				return
			}

			// An edit: "a" is kept, "d" inserted by the new change.
			v2 := v1
			v2.Parts = []uint64{20}
			e := doc("1", 0, chunks("a", "d"))
			e.Version = v2
			e.Provenance = sink.Provenance{ModelVersion: "model-2026", Chunker: "greedy/64/16/128"}
			_, err = s.Upsert(ctx, e)
			require.NoError(t, err)
			got = provenanceRows(t, b, "public.articles/1")
			require.Equal(t, "model-2025", got["a"].ModelVersion, "a kept chunk keeps the provenance of the change that wrote it")
			require.Equal(t, v1.Position(), got["a"].Position)
			require.Equal(t, "model-2026", got["d"].ModelVersion)
			require.Equal(t, v2.Position(), got["d"].Position)
			require.Empty(t, got["d"].TraceID, "a change without a trace records none")
		})
	}
}

func normal(r provenanceRow) provenanceRow {
	r.Committed = r.Committed.UTC()
	return r
}

// A group of reads fails as a whole when one document's id cannot be
// stored (U+0000); each document is then read alone, so only that one
// fails (and is dead-lettered by the pipeline), never its neighbours.
func TestGroupedReadsFailOnlyTheBadDocument(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t)
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a")))
	require.NoError(t, err)
	for _, fenceOnly := range []bool{true, false} {
		outs, errs := s.LookupBatchForTest(ctx, []string{"public.articles/1", "public.articles/bad\x00key"}, fenceOnly)
		require.NoError(t, errs[0], "fenceOnly=%v", fenceOnly)
		require.True(t, outs[0].Found)
		require.Equal(t, ver(1).String(), outs[0].Doc.Version.String())
		require.Error(t, errs[1])
		require.ErrorContains(t, errs[1], "22021")
	}
}

// A bulk load writes whole documents with COPY, never a row in place: a
// metadata-only write is answered TextChanged (nothing buffered), and the
// caller writes the document whole.
func TestBulkRefusesMetadataOnlyWrites(t *testing.T) {
	ctx := context.Background()
	_, b := setup(t)
	s, err := openBulk(t, b)
	require.NoError(t, err)
	require.Equal(t, sink.Bulk, s.Mode())
	out, err := s.Upsert(ctx, metadataDoc("1", 1, "rh-1", map[string]any{"semantic_tag": "x"}))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{TextChanged: true}, out)
	require.NoError(t, s.Flush(ctx))
	_, found, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.False(t, found, "nothing was buffered")
}
