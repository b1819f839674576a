package sink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// cacheRow is an embedding cache entry as the policy test reads it.
type cacheRow struct {
	vec      []float32
	text     *string
	lastUsed time.Time
}

func readCacheRow(t *testing.T, b *testBundle, hash string) cacheRow {
	t.Helper()
	var r cacheRow
	var v pgvector.Vector
	require.NoError(t, b.pool.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT embedding, text, last_used_at FROM %s.embedding_cache WHERE model = 'test-model' AND content_hash = $1", b.schema), hash).
		Scan(&v, &r.text, &r.lastUsed))
	r.vec = v.Slice()
	return r
}

// TestCacheWritersShareOnePolicy writes a key that is cached already, with
// another vector and a text, through each path that writes the cache: the
// document write (Upsert), CacheVectors and the bulk load. Each must leave
// the entry's vector as it was (chunks were copied from it), give it the
// origin text it lacked, and record its use when the last one is old.
func TestCacheWritersShareOnePolicy(t *testing.T) {
	paths := map[string]func(ctx context.Context, s *sink.Store, b *testBundle, hash string, vec []float32) error{
		"Upsert": func(ctx context.Context, s *sink.Store, b *testBundle, hash string, vec []float32) error {
			cs := chunks(hash)
			cs[0].Vector = vec
			_, err := s.Upsert(ctx, doc("w", 1, cs))
			return err
		},
		"CacheVectors": func(ctx context.Context, s *sink.Store, b *testBundle, hash string, vec []float32) error {
			return s.CacheVectors(ctx, []string{hash}, []string{"text of " + hash}, [][]float32{vec}, "")
		},
		"Bulk": func(ctx context.Context, s *sink.Store, b *testBundle, hash string, vec []float32) error {
			bulk, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Bulk, Schema: b.schema, Index: "articles", Model: "test-model", Dimensions: dims})
			if err != nil {
				return err
			}
			cs := chunks(hash)
			cs[0].Vector = vec
			if _, err := bulk.Upsert(ctx, doc("w", 1, cs)); err != nil {
				return err
			}
			return bulk.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1})
		},
	}
	for name, write := range paths {
		t.Run(name, func(t *testing.T) {
			s, b := setup(t)
			ctx := context.Background()
			old := vecFor("first")
			// An entry cached before origin texts were kept, last used
			// two days ago.
			_, err := b.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.embedding_cache (model, dimensions, content_hash, embedding, last_used_at)
				VALUES ('test-model', $1, 'k', $2, now() - interval '2 days')`, b.schema), dims, pgvector.NewVector(old))
			require.NoError(t, err)

			require.NoError(t, write(ctx, s, b, "k", vecFor("second")))
			got := readCacheRow(t, b, "k")
			require.Equal(t, old, got.vec, "a cached vector is never replaced by a later write")
			require.NotNil(t, got.text, "an entry without an origin text gains the writer's")
			require.Equal(t, "text of k", *got.text)
			require.WithinDuration(t, time.Now(), got.lastUsed, time.Hour, "a write of a cached key records its use")

			// A second write an instant later changes nothing: the use was
			// recorded within the hour and the text is there.
			var xmin1, xmin2 string
			q := fmt.Sprintf("SELECT xmin::text FROM %s.embedding_cache WHERE content_hash = 'k'", b.schema)
			require.NoError(t, b.pool.QueryRow(ctx, q).Scan(&xmin1))
			require.NoError(t, s.CacheVectors(ctx, []string{"k"}, []string{"other text"}, [][]float32{vecFor("third")}, ""))
			require.NoError(t, b.pool.QueryRow(ctx, q).Scan(&xmin2))
			require.Equal(t, xmin1, xmin2, "a write that changes nothing writes no new row version")
			require.Equal(t, "text of k", *readCacheRow(t, b, "k").text, "the first origin text stays")
		})
	}
}

// TestRewriteReplacesTheCachedVector pins the one exception to the cache's
// policy: a vector re-embedded on purpose (repair, repayment) replaces the
// entry of its text, so a later document with that text copies the fresh
// vector, not the one just found wrong; the chunk gets it too.
func TestRewriteReplacesTheCachedVector(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	cs := chunks("k")
	cs[0].Vector = vecFor("stale")
	_, err := s.Upsert(ctx, doc("r", 1, cs))
	require.NoError(t, err)
	require.Equal(t, vecFor("stale"), readCacheRow(t, b, "k").vec)
	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT id FROM %s.chunks WHERE content_hash = 'k'", b.schema)).Scan(&id))

	n, err := s.RewriteVectors(ctx, []sink.Rewrite{{ChunkID: id, Hash: "k", Text: "text of k", Vector: vecFor("fresh")}}, false)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, vecFor("fresh"), readCacheRow(t, b, "k").vec, "a deliberate re-embedding replaces the cached vector")
	var v pgvector.Vector
	require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT embedding FROM %s.chunks WHERE id = $1", b.schema), id).Scan(&v))
	require.Equal(t, vecFor("fresh"), v.Slice())

	// An ordinary write of the same text afterwards keeps the fresh vector.
	require.NoError(t, s.CacheVectors(ctx, []string{"k"}, []string{"text of k"}, [][]float32{vecFor("later")}, ""))
	require.Equal(t, vecFor("fresh"), readCacheRow(t, b, "k").vec)
}

// TestReadsMarkOnlyStaleEntriesUsed checks that Lookup and Cached record
// the use of a cache entry whose last use is older than an hour, and leave
// an entry used since then as it is: the mark is what retention counts
// from, and rewriting it on every read would write a row version per read.
func TestReadsMarkOnlyStaleEntriesUsed(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("old", "recent")))
	require.NoError(t, err)
	set := func(hash string, ago time.Duration) {
		t.Helper()
		_, err := b.pool.Exec(ctx, fmt.Sprintf("UPDATE %s.embedding_cache SET last_used_at = now() - make_interval(secs => $2) WHERE content_hash = $1", b.schema),
			hash, ago.Seconds())
		require.NoError(t, err)
	}
	xmin := func(hash string) string {
		t.Helper()
		var x string
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT xmin::text FROM %s.embedding_cache WHERE content_hash = $1", b.schema), hash).Scan(&x))
		return x
	}
	reads := map[string]func() (map[string]bool, error){
		"Lookup": func() (map[string]bool, error) {
			l, err := s.Lookup(ctx, sink.DocID("public.articles", "2"), []string{"old", "recent", "absent"})
			return l.Cached, err
		},
		"Cached": func() (map[string]bool, error) { return s.Cached(ctx, []string{"old", "recent", "absent"}) },
	}
	for name, read := range reads {
		set("old", 3*time.Hour)
		set("recent", 10*time.Minute)
		recent := xmin("recent")
		have, err := read()
		require.NoError(t, err, name)
		require.Equal(t, map[string]bool{"old": true, "recent": true}, have, name)
		require.WithinDuration(t, time.Now(), readCacheRow(t, b, "old").lastUsed, time.Minute, "%s marks the stale entry used", name)
		require.Equal(t, recent, xmin("recent"), "%s leaves an entry used within the hour unwritten", name)
		require.Less(t, time.Since(readCacheRow(t, b, "recent").lastUsed), 11*time.Minute, name)
		require.Greater(t, time.Since(readCacheRow(t, b, "recent").lastUsed), 9*time.Minute, name)
	}
}
