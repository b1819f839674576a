package sink_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

const (
	chunkerA = "content-defined/512/128/1024"
	chunkerB = "content-defined/256/64/1024"
)

// openChunker opens index "articles" of b's schema for writing with the
// chunker fingerprint fp, logging into log when not nil.
func openChunker(t *testing.T, b *testBundle, fp string, log *bytes.Buffer) *sink.Store {
	t.Helper()
	cfg := sink.Config{Mode: sink.Write, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims, Chunker: fp}
	if log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	st, err := sink.OpenIndex(context.Background(), b.pool, cfg)
	require.NoError(t, err)
	return st
}

func recordedChunker(t *testing.T, b *testBundle, index string) *string {
	t.Helper()
	var fp *string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT chunker FROM indexes WHERE name = $1", index).Scan(&fp))
	return fp
}

func noChange(t *testing.T, st *sink.Store, msg string) {
	t.Helper()
	from, to, changed := st.ChunkerChange()
	require.False(t, changed, msg)
	require.Empty(t, from+to, msg)
}

// A writer records its chunker settings on the index; one that finds
// others recorded replaces them and reports the change, naming both and
// how many chunks were cut with the others. A new index, an index that
// records none yet, the same settings, a reader and a writer without
// settings report nothing.
func TestOpenRecordsAndReportsTheChunker(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	b := &testBundle{pool: pool, schema: schema}
	ctx := context.Background()

	// Registered before fingerprints were recorded: none recorded.
	_, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	require.Nil(t, recordedChunker(t, b, "articles"))
	noChange(t, openChunker(t, b, chunkerA, nil), "an index that records none takes the first settings silently")
	require.Equal(t, chunkerA, *recordedChunker(t, b, "articles"))

	// A new index records its settings at creation.
	created, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "fresh", Model: "test-model", Dimensions: dims,
		Create: true, Chunker: chunkerB})
	require.NoError(t, err)
	noChange(t, created, "a new index")
	require.Equal(t, chunkerB, *recordedChunker(t, b, "fresh"))

	st := openChunker(t, b, chunkerA, nil)
	noChange(t, st, "the same settings")
	for _, key := range []string{"1", "2"} {
		_, err := st.Upsert(ctx, withChunker(doc(key, 1, chunks("a"+key, "b"+key)), chunkerA))
		require.NoError(t, err)
	}
	// A reader, and a writer that does not chunk, record nothing.
	rd, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: schema, Index: "articles", Chunker: chunkerB})
	require.NoError(t, err)
	noChange(t, rd, "a reader")
	noChange(t, openChunker(t, b, "", nil), "a writer without settings")
	require.Equal(t, chunkerA, *recordedChunker(t, b, "articles"))

	var log bytes.Buffer
	st = openChunker(t, b, chunkerB, &log)
	from, to, changed := st.ChunkerChange()
	require.True(t, changed)
	require.Equal(t, [2]string{chunkerA, chunkerB}, [2]string{from, to})
	require.Equal(t, chunkerB, *recordedChunker(t, b, "articles"))
	require.Contains(t, log.String(), "level=WARN")
	require.Contains(t, log.String(), "from="+chunkerA)
	require.Contains(t, log.String(), "to="+chunkerB)
	require.Contains(t, log.String(), "chunks_other_settings=4")
	require.Contains(t, log.String(), "chunks_unknown_settings=0")
	require.Contains(t, log.String(), "ragsync reindex --to")

	log.Reset()
	noChange(t, openChunker(t, b, chunkerB, &log), "reopened with the settings just recorded")
	require.NotContains(t, log.String(), "level=WARN")

	// A shadow of a blue/green re-index records its writer's settings too.
	sh, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "fresh", Physical: true, KeepFullText: true, Chunker: chunkerA})
	require.NoError(t, err)
	from, to, changed = sh.ChunkerChange()
	require.True(t, changed)
	require.Equal(t, [2]string{chunkerB, chunkerA}, [2]string{from, to})
	require.Equal(t, chunkerA, *recordedChunker(t, b, "fresh"))
}

// withChunker is d written by a chunker of fingerprint fp.
func withChunker(d sink.Document, fp string) sink.Document {
	d.Provenance.Chunker = fp
	d.Provenance.ModelVersion = "test-model-v1"
	return d
}

// An index written with chunker settings A, then reopened with B, counts
// its chunks by model version and chunker: both settings show, with their
// counts, beside another index's.
func TestChunkGroupsShowTheMix(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	st := openChunker(t, b, chunkerA, nil)
	_, err := st.Upsert(ctx, withChunker(doc("1", 1, chunks("a1", "b1", "c1")), chunkerA))
	require.NoError(t, err)
	_, err = st.Upsert(ctx, withChunker(doc("2", 1, chunks("a2")), chunkerA))
	require.NoError(t, err)
	st = openChunker(t, b, chunkerB, nil)
	_, err = st.Upsert(ctx, withChunker(doc("3", 1, chunks("a3", "b3")), chunkerB))
	require.NoError(t, err)
	other, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "other", Model: "test-model", Dimensions: dims, Create: true})
	require.NoError(t, err)
	_, err = other.Upsert(ctx, doc("9", 1, chunks("z9")))
	require.NoError(t, err)

	cat := sink.NewCatalog(b.pool, b.schema)
	groups, err := cat.ChunkGroups(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, []sink.ChunkGroup{
		{Index: "articles", ModelVersion: "test-model-v1", Chunker: chunkerA, Chunks: 4},
		{Index: "articles", ModelVersion: "test-model-v1", Chunker: chunkerB, Chunks: 2},
	}, stripped(groups))
	all, err := cat.ChunkGroups(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, sink.ChunkGroup{Index: "other", Chunks: 1}, stripped(all)[2], "written without provenance: unknown")
}

// stripped is groups without their unexported fields, to compare.
func stripped(groups []sink.ChunkGroup) []sink.ChunkGroup {
	out := make([]sink.ChunkGroup, len(groups))
	for i, g := range groups {
		out[i] = sink.ChunkGroup{Index: g.Index, ModelVersion: g.ModelVersion, Chunker: g.Chunker, Chunks: g.Chunks}
	}
	return out
}

// Leftovers counts what is left after a change, over the live
// documents: chunks cut with other settings than the recorded ones, chunks
// of unknown provenance, chunks of an older model version (the newest is
// the one the provider last reported into the embedding cache, not the
// newest chunk's), and documents without a render hash.
func TestLeftoversCountWhatIsLeft(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	st := openChunker(t, b, chunkerB, nil)
	for _, key := range []string{"1", "2", "3", "4", "5"} {
		_, err := st.Upsert(ctx, withChunker(doc(key, 1, chunks("a"+key, "b"+key)), chunkerB))
		require.NoError(t, err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// Every row as the write path records it, whatever it recorded.
	exec("UPDATE chunks SET chunker = $1, model_version = 'test-model-v1'", chunkerB)
	exec("UPDATE embedding_cache SET model_version = 'test-model-v1'")
	exec("UPDATE documents SET render_hash = 'h'")
	cat := sink.NewCatalog(b.pool, b.schema)
	l, err := cat.Leftovers(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, chunkerB, l.Chunker)
	require.Zero(t, l.OtherChunker+l.UnknownChunker+l.UnknownModelVersion+l.Unknown+l.OldModelVersion+l.NoRenderHash)
	require.Empty(t, l.ModelVersion, "one model version: nothing is older")
	require.Equal(t, []sink.ChunkGroup{{Index: "articles", ModelVersion: "test-model-v1", Chunker: chunkerB, Chunks: 10}}, stripped(l.Groups))

	// Document 1 was cut with A, by a newer model version, the one the
	// provider last reported into the cache; document 2 before chunkers
	// were recorded; document 3's vectors before model versions were.
	// Documents 1 and 2 were written before render hashes were. Document
	// 4's chunks are the newest live ones, by the older version; those of
	// document 5 (deleted) are newer still, and count for nothing.
	exec("UPDATE chunks SET chunker = $1, model_version = 'test-model-v2' WHERE doc_id = 'public.articles/1'", chunkerA)
	exec("UPDATE chunks SET chunker = NULL WHERE doc_id = 'public.articles/2'")
	exec("UPDATE chunks SET model_version = NULL WHERE doc_id = 'public.articles/3'")
	exec("UPDATE chunks SET model_version = 'test-model-v0', chunker = NULL WHERE doc_id = 'public.articles/5'")
	exec("UPDATE embedding_cache SET created_at = now() - interval '1 hour'")
	exec("UPDATE embedding_cache SET model_version = 'test-model-v2', created_at = now() WHERE content_hash = 'a1'")
	exec("UPDATE documents SET render_hash = NULL WHERE id IN ('public.articles/1', 'public.articles/2', 'public.articles/5')")
	_, err = st.Delete(ctx, "public.articles", "5", ver(2), docTime)
	require.NoError(t, err)

	l, err = cat.Leftovers(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, int64(2), l.OtherChunker)
	require.Equal(t, int64(2), l.UnknownChunker)
	require.Equal(t, int64(2), l.UnknownModelVersion)
	require.Equal(t, int64(4), l.Unknown)
	require.Equal(t, "test-model-v2", l.ModelVersion, "the cache's newest, not the newest chunk's")
	require.Equal(t, int64(4), l.OldModelVersion, "documents 2 and 4 (v1); 3 is unknown, 1 the newest, 5 deleted")
	require.Equal(t, int64(2), l.NoRenderHash)

	// Without a cache entry recording one of them (purged), the version of
	// the most recently inserted live chunk.
	exec("UPDATE embedding_cache SET model_version = NULL")
	l, err = cat.Leftovers(ctx, "articles")
	require.NoError(t, err)
	require.Equal(t, "test-model-v1", l.ModelVersion)
	require.Equal(t, int64(2), l.OldModelVersion, "document 1")

	_, err = cat.Leftovers(ctx, "nope")
	require.ErrorIs(t, err, sink.ErrNoIndex)
}

// ragsync_index_chunks counts each index's chunks by model version and
// chunker ("unknown" for NULL), read on a scrape at most once per period:
// a scrape within it answers the last reading.
func TestIndexChunksMetric(t *testing.T) {
	st, b := setup(t)
	ctx := context.Background()
	_, err := st.Upsert(ctx, doc("1", 1, chunks("a1", "b1", "c1")))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE chunks SET chunker = $1, model_version = 'test-model-v1' WHERE content_hash <> 'c1'", chunkerA)
	require.NoError(t, err)

	clock := time.Unix(1700000000, 0)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(sink.ChunksCollectorForTest(sink.NewCatalog(b.pool, b.schema), time.Minute, func() time.Time { return clock })))
	want := func(series string) {
		t.Helper()
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ragsync_index_chunks Chunk rows of each index by the model version that embedded them and the chunker settings (fingerprint) that cut them; "unknown" for rows written before either was recorded. Several series for one index are a mix that ragsync index status details. Read at most once every 15 minutes, on a scrape.
# TYPE ragsync_index_chunks gauge
`+series), "ragsync_index_chunks"))
	}
	want(`ragsync_index_chunks{chunker="` + chunkerA + `",index="articles",model_version="test-model-v1"} 2
ragsync_index_chunks{chunker="unknown",index="articles",model_version="unknown"} 1
`)
	_, err = b.pool.Exec(ctx, "UPDATE chunks SET chunker = $1, model_version = 'test-model-v1'", chunkerB)
	require.NoError(t, err)
	clock = clock.Add(59 * time.Second)
	want(`ragsync_index_chunks{chunker="` + chunkerA + `",index="articles",model_version="test-model-v1"} 2
ragsync_index_chunks{chunker="unknown",index="articles",model_version="unknown"} 1
`)
	clock = clock.Add(time.Second)
	want(`ragsync_index_chunks{chunker="` + chunkerB + `",index="articles",model_version="test-model-v1"} 3
`)
}

// A writer opened with a registry registers ragsync_index_chunks once,
// however many indexes it opens.
func TestIndexChunksMetricRegisteredByWriters(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	for _, name := range []string{"articles", "other"} {
		_, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: name, Model: "test-model", Dimensions: dims,
			Create: true, Registerer: reg})
		require.NoError(t, err)
	}
	n, err := testutil.GatherAndCount(reg, "ragsync_index_chunks")
	require.NoError(t, err)
	require.Zero(t, n, "no chunks yet")
	st, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "other", Registerer: reg})
	require.NoError(t, err)
	_, err = st.Upsert(ctx, doc("1", 1, chunks("a1")))
	require.NoError(t, err)
	// The first reading was empty and is kept for a minute: a new
	// registry reads at once.
	reg = prometheus.NewRegistry()
	_, err = sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Schema: b.schema, Index: "other", Registerer: reg})
	require.NoError(t, err)
	n, err = testutil.GatherAndCount(reg, "ragsync_index_chunks")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
