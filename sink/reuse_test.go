package sink_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgvector/pgvector-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

func TestUpsertReusedVector(t *testing.T) {
	s, b := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)

	// "a2" takes a's vector.
	cs := chunks("a2", "b")
	cs[0].Vector, cs[0].VectorHash = nil, "a"
	out, err := s.Upsert(ctx, doc("1", 2, cs))
	require.NoError(t, err)
	require.Equal(t, 1, out.Inserted)

	got, err := s.StoredChunks(ctx, "public.articles/1")
	require.NoError(t, err)
	// The reused vector is debt, dated by the commit when the pipeline
	// gave no date; the chunk's own vector is not.
	require.WithinDuration(t, time.Now(), got[0].DebtSince, time.Minute)
	require.True(t, got[1].DebtSince.IsZero())
	got[0].DebtSince = time.Time{}
	require.NoError(t, err)
	require.Equal(t, []sink.StoredChunk{
		{Position: 0, Hash: "a2", Text: "text of a2", VectorHash: "a", OriginCached: true, OriginText: "text of a"},
		{Position: 1, Hash: "b", Text: "text of b", VectorHash: "b", OriginCached: true, OriginText: "text of b"},
	}, got)
	vecs, err := s.Vectors(ctx, []string{"a", "a2"})
	require.NoError(t, err)
	require.Equal(t, map[string][]float32{"a": vecFor("a")}, vecs, "a reused vector must not be cached as exact")
	var same bool
	require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT embedding = $1::vector FROM %s.chunks WHERE content_hash = 'a2'", b.schema),
		pgvector.NewVector(vecFor("a"))).Scan(&same))
	require.True(t, same)

	t.Run("unknown document has no chunks", func(t *testing.T) {
		got, err := s.StoredChunks(ctx, "public.articles/none")
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

func TestUpsertReuseFailures(t *testing.T) {
	s, b := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a")))
	require.NoError(t, err)

	t.Run("vector and another vector hash", func(t *testing.T) {
		cs := chunks("x")
		cs[0].VectorHash = "a"
		_, err := s.Upsert(ctx, doc("1", 2, cs))
		require.ErrorIs(t, err, sink.ErrInvalidDocument)
	})
	t.Run("vector with its own hash is fine", func(t *testing.T) {
		cs := chunks("y")
		cs[0].VectorHash = "y"
		_, err := s.Upsert(ctx, doc("2", 1, cs))
		require.NoError(t, err)
	})
	t.Run("origin gone is retryable, not permanent", func(t *testing.T) {
		_, err := b.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s.embedding_cache WHERE content_hash = 'a'", b.schema))
		require.NoError(t, err)
		cs := chunks("a3")
		cs[0].Vector, cs[0].VectorHash = nil, "a"
		_, err = s.Upsert(ctx, doc("1", 3, cs))
		require.ErrorIs(t, err, sink.ErrOriginGone)
		require.True(t, sink.Retryable(err))
		var p interface{ Permanent() bool }
		require.False(t, errors.As(err, &p) && p.Permanent())
		d, _, err := s.Document(ctx, "public.articles/1")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, d.Hashes, "nothing written")
	})
	t.Run("edit similarity out of range", func(t *testing.T) {
		d := doc("1", 4, chunks("a"))
		d.EditSimilarity, d.EditMethod = 101, chunker.MethodShingle
		_, err := s.Upsert(ctx, d)
		require.ErrorIs(t, err, sink.ErrInvalidDocument)
	})
}

func TestEditSimilarityMetric(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	reg := prometheus.NewRegistry()
	cfg := sink.Config{Mode: sink.Write, Schema: schema, Index: "articles", Model: "test-model", Dimensions: dims, Registerer: reg}
	s, err := sink.OpenIndex(t.Context(), pool, cfg)
	require.NoError(t, err)
	// A second Store on the same registry shares the collector.
	_, err = sink.OpenIndex(t.Context(), pool, cfg)
	require.NoError(t, err)

	d := doc("1", 1, chunks("a"))
	d.Fuzzy = "3:abc:def"
	d.EditSimilarity, d.EditMethod = 40, chunker.MethodShingle // ignored on create
	_, err = s.Upsert(t.Context(), d)
	require.NoError(t, err)
	d.Version, d.EditSimilarity = ver(2), 75
	_, err = s.Upsert(t.Context(), d)
	require.NoError(t, err)
	// A duplicate is not an edit.
	_, err = s.Upsert(t.Context(), d)
	require.NoError(t, err)
	// Unmeasured update.
	d.Version, d.EditMethod = ver(3), ""
	_, err = s.Upsert(t.Context(), d)
	require.NoError(t, err)

	require.Equal(t, 1, testutil.CollectAndCount(reg, "ragsync_sink_edit_similarity"))
	n, err := testutil.GatherAndCount(reg, "ragsync_sink_edit_similarity")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ragsync_sink_edit_similarity Similarity (0-100) of each applied document update to the version it replaced, by method: ssdeep, or shingle for texts under ssdeep's 4096-byte minimum.
# TYPE ragsync_sink_edit_similarity histogram
ragsync_sink_edit_similarity_bucket{method="shingle",le="10"} 0
ragsync_sink_edit_similarity_bucket{method="shingle",le="25"} 0
ragsync_sink_edit_similarity_bucket{method="shingle",le="50"} 0
ragsync_sink_edit_similarity_bucket{method="shingle",le="75"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="90"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="95"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="98"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="99"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="100"} 1
ragsync_sink_edit_similarity_bucket{method="shingle",le="+Inf"} 1
ragsync_sink_edit_similarity_sum{method="shingle"} 75
ragsync_sink_edit_similarity_count{method="shingle"} 1
`), "ragsync_sink_edit_similarity"))
	var fuzzy *string
	var sim *int16
	require.NoError(t, pool.QueryRow(t.Context(), fmt.Sprintf("SELECT fuzzy_hash, edit_similarity FROM %s.documents", schema)).Scan(&fuzzy, &sim))
	require.Equal(t, "3:abc:def", *fuzzy)
	require.Nil(t, sim, "an unmeasured update clears the last magnitude")
}

// TestStoredChunksOwnVectorOriginIsChunkText: a chunk whose vector is its
// own has its own text as origin text (the same normalised text as the
// cache's copy), so the cache's copy is not read; one whose cache entry
// has no text still has none, and a reused vector's origin is the cache's
// text.
func TestStoredChunksOwnVectorOriginIsChunkText(t *testing.T) {
	s, b := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b", "c")))
	require.NoError(t, err)
	cs := chunks("a2", "b", "c")
	cs[0].Vector, cs[0].VectorHash = nil, "a"
	_, err = s.Upsert(ctx, doc("1", 2, cs))
	require.NoError(t, err)
	// The cache's copies differ from the chunks' texts (as a reflowed
	// text would), and c's has no text.
	_, err = b.pool.Exec(ctx, fmt.Sprintf("UPDATE %s.embedding_cache SET text = CASE content_hash WHEN 'c' THEN NULL ELSE 'cached ' || content_hash END", b.schema))
	require.NoError(t, err)
	got, err := s.StoredChunks(ctx, "public.articles/1")
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, "cached a", got[0].OriginText, "a reused vector's origin is the cache's text")
	require.Equal(t, "text of b", got[1].OriginText, "an own vector's origin is the chunk's text")
	require.True(t, got[2].OriginCached)
	require.Empty(t, got[2].OriginText, "a cache entry without text is never compared")
	l, err := s.Lookup(ctx, "public.articles/1", nil)
	require.NoError(t, err)
	require.Equal(t, got, l.Chunks)
}
