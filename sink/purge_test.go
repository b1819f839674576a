package sink_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// age moves a timestamp column of the rows matching where back by d.
func age(t *testing.T, b *testBundle, table, column, where string, d time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), fmt.Sprintf("UPDATE %s.%s SET %s = %s - make_interval(secs => $1) WHERE %s",
		b.schema, table, column, column, where), d.Seconds())
	require.NoError(t, err)
}

func TestPurge(t *testing.T) {
	s, b := setup(t)
	ctx := t.Context()
	for _, d := range []sink.Document{
		doc("old", 1, chunks("o1", "o2")),  // deleted long ago: purged
		doc("young", 1, chunks("y1")),      // deleted recently: kept
		doc("live", 1, chunks("l1", "o1")), // live, shares o1
	} {
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}
	for _, k := range []string{"old", "young"} {
		_, err := s.Delete(ctx, "public.articles", k, ver(2), time.Time{})
		require.NoError(t, err)
	}
	age(t, b, "documents", "deleted_at", "doc_key = 'old'", 800*time.Hour)
	// Every cache entry unused for 100 days, except y1.
	age(t, b, "embedding_cache", "last_used_at", "content_hash <> 'y1'", 2400*time.Hour)
	// An unreferenced, long-unused entry from elsewhere.
	_, err := s.Upsert(ctx, doc("tmp", 1, chunks("gone")))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s.documents WHERE doc_key = 'tmp'", b.schema))
	require.NoError(t, err)
	age(t, b, "embedding_cache", "last_used_at", "content_hash = 'gone'", 2400*time.Hour)

	res, err := s.Purge(ctx, sink.PurgeOptions{})
	require.NoError(t, err)
	// o2 was only old's: purged with the cache retention passed; o1 is
	// still a live chunk's, l1 too; y1 recent.
	require.Equal(t, sink.PurgeResult{Documents: 1, Chunks: 2, CacheEntries: 2}, res)

	_, found, err := s.Document(ctx, "public.articles/old")
	require.NoError(t, err)
	require.False(t, found)
	yd, found, err := s.Document(ctx, "public.articles/young")
	require.NoError(t, err)
	require.True(t, found && yd.Deleted)
	vecs, err := s.Vectors(ctx, []string{"o1", "o2", "y1", "l1", "gone"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"o1", "y1", "l1"}, keys(vecs))

	t.Run("idempotent", func(t *testing.T) {
		res, err := s.Purge(ctx, sink.PurgeOptions{})
		require.NoError(t, err)
		require.Zero(t, res)
	})
	t.Run("cached embeddings of purged documents survive until the cache retention", func(t *testing.T) {
		_, err := s.Upsert(ctx, doc("young2", 1, chunks("z1")))
		require.NoError(t, err)
		_, err = s.Delete(ctx, "public.articles", "young2", ver(2), time.Time{})
		require.NoError(t, err)
		age(t, b, "documents", "deleted_at", "doc_key = 'young2'", time.Hour)
		res, err := s.Purge(ctx, sink.PurgeOptions{DocumentRetention: time.Minute})
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Documents)
		// Re-created: its vector is still cached, nothing to embed.
		cs := chunks("z1")
		cs[0].Vector = nil
		out, err := s.Upsert(ctx, doc("young2", 3, cs))
		require.NoError(t, err)
		require.True(t, out.Applied)
	})
	t.Run("keep cache", func(t *testing.T) {
		age(t, b, "embedding_cache", "last_used_at", "true", 2400*time.Hour)
		_, err := b.pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s.documents", b.schema))
		require.NoError(t, err)
		res, err := s.Purge(ctx, sink.PurgeOptions{KeepCache: true})
		require.NoError(t, err)
		require.Zero(t, res.CacheEntries)
	})
	t.Run("negative retention", func(t *testing.T) {
		_, err := s.Purge(ctx, sink.PurgeOptions{CacheRetention: -time.Hour})
		require.ErrorIs(t, err, sink.ErrInvalidConfig)
	})
}

func keys(m map[string][]float32) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestVectorsMarksEntriesUsed(t *testing.T) {
	s, b := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, doc("1", 1, chunks("a", "b")))
	require.NoError(t, err)
	age(t, b, "embedding_cache", "last_used_at", "true", 48*time.Hour)
	_, err = s.Vectors(ctx, []string{"a", "missing"})
	require.NoError(t, err)
	var aged []string
	rows, err := b.pool.Query(ctx, fmt.Sprintf("SELECT content_hash FROM %s.embedding_cache WHERE last_used_at < now() - interval '1 day' ORDER BY 1", b.schema))
	require.NoError(t, err)
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		aged = append(aged, h)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"b"}, aged, "a was read, b was not")
}

func TestDupes(t *testing.T) {
	s, _ := setup(t)
	ctx := t.Context()
	w := make([]string, 1200)
	for i := range w {
		w[i] = fmt.Sprintf("token%d", i)
	}
	long := strings.Join(w, " ")
	longEdited := strings.Replace(long, "token600", "changed", 1)
	other := strings.ReplaceAll(long, "token", "other")
	add := func(key, text string) {
		t.Helper()
		d := doc(key, 1, []sink.Chunk{{Position: 0, Hash: chunker.Hash(text), Text: text, Vector: vecFor(key)}})
		// long2 is stored without a hash, as the pipeline stores a new
		// document: Dupes hashes its text.
		if h, err := chunker.FuzzyHash(text); err == nil && key != "long2" {
			d.Fuzzy = h
		}
		_, err := s.Upsert(ctx, d)
		require.NoError(t, err)
	}
	add("long1", long)
	add("long2", longEdited)
	add("long3", other)
	add("short1", "the quick brown fox jumps over the lazy dog")
	add("short2", "the quick brown fox jumps over the lazy cat")
	add("short3", "completely unrelated words in this one")
	add("deleted", long)
	_, err := s.Delete(ctx, "public.articles", "deleted", ver(2), time.Time{})
	require.NoError(t, err)

	got, err := s.Dupes(ctx, 60)
	require.NoError(t, err)
	require.Len(t, got, 2, "%+v", got)
	require.Equal(t, "public.articles/long1", got[0].A)
	require.Equal(t, "public.articles/long2", got[0].B)
	require.Equal(t, chunker.MethodSsdeep, got[0].Method)
	require.GreaterOrEqual(t, got[0].Score, 90)
	require.Equal(t, sink.Dupe{A: "public.articles/short1", B: "public.articles/short2", Score: 75, Method: chunker.MethodShingle}, got[1])

	_, err = s.Dupes(ctx, 101)
	require.ErrorIs(t, err, sink.ErrInvalidQuery)
}

// TestPurgeRetentionsAsPrinted pins what a purge's summary says of its
// retentions: defaults for 0, "0s" for a purge up to now, "kept" for a
// cache left alone.
func TestPurgeRetentionsAsPrinted(t *testing.T) {
	for _, c := range []struct {
		opts        sink.PurgeOptions
		docs, cache string
	}{
		{sink.PurgeOptions{}, "720h0m0s", "2160h0m0s"},
		{sink.PurgeOptions{DocumentRetention: sink.RetainNothing, CacheRetention: time.Hour}, "0s", "1h0m0s"},
		{sink.PurgeOptions{CacheRetention: sink.RetainNothing, KeepCache: true}, "720h0m0s", "kept"},
	} {
		docs, cache := c.opts.Retentions()
		if docs != c.docs || cache != c.cache {
			t.Errorf("%+v: retentions %q, %q; want %q, %q", c.opts, docs, cache, c.docs, c.cache)
		}
	}
	if o := (sink.PurgeOptions{CacheRetention: time.Minute}).WithDefaults(); o.DocumentRetention != sink.DefaultDocumentRetention || o.CacheRetention != time.Minute {
		t.Errorf("WithDefaults: %+v", o)
	}
}
