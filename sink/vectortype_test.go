package sink_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// typedCorpus is n distinct texts of 12 words from a vocabulary of
// pseudo-words, reproducible from seed: texts share words, so their hashing
// vectors have a spread of cosine similarities, as text embeddings do.
func typedCorpus(n int, seed uint64) []string {
	syl := []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "du", "fi", "go", "hu", "je"}
	r := rand.New(rand.NewPCG(seed, 7))
	vocab := make([]string, 400)
	for i := range vocab {
		vocab[i] = syl[r.IntN(len(syl))] + syl[r.IntN(len(syl))] + syl[r.IntN(len(syl))] + fmt.Sprint(i%7)
	}
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		words := make([]string, 12)
		for j := range words {
			words[j] = vocab[r.IntN(len(vocab))]
		}
		t := strings.Join(words, " ")
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// typedDoc is document key with one chunk of text and its vector; tenants
// and languages alternate so filters have something to keep and drop.
func typedDoc(key int, v uint64, text string, vec []float32) sink.Document {
	return sink.Document{
		Table: "public.docs", Key: fmt.Sprint(key), Version: ver(v), SourceTS: docTime,
		Tenant:   typedTenant(key),
		Metadata: map[string]any{"lang": typedLang(key)},
		Chunks:   []sink.Chunk{{Position: 0, Hash: fmt.Sprintf("h%d-%d", key, v), Text: text, Tokens: 12, Vector: vec}},
	}
}

func typedTenant(key int) string { return fmt.Sprintf("t%d", key%2) }
func typedLang(key int) string   { return []string{"en", "de", "fr"}[key%3] }

func openTyped(t testing.TB, pool *pgxpool.Pool, schema, index string, typ sink.VectorType, d int, mode sink.Mode) *sink.Store {
	t.Helper()
	s, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: mode, Schema: schema, Index: index, Model: embedder.HashingModel,
		Dimensions: d, Type: typ, Create: true, SkipFullText: true})
	require.NoError(t, err)
	return s
}

func embedAll(t testing.TB, d int, texts []string) [][]float32 {
	t.Helper()
	vecs, err := embedder.NewHashing(d).Embed(context.Background(), texts)
	require.NoError(t, err)
	return vecs
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// exactTop is the keys of the k documents nearest q by cosine among those
// keep accepts: what an exhaustive search returns.
func exactTop(q []float32, vecs map[int][]float32, keep func(int) bool, k int) []string {
	type kd struct {
		key int
		d   float64
	}
	var all []kd
	for key, v := range vecs {
		if keep(key) {
			all = append(all, kd{key, 1 - cosine(q, v)})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].d < all[j].d || (all[i].d == all[j].d && all[i].key < all[j].key) })
	var out []string
	for i := 0; i < len(all) && i < k; i++ {
		out = append(out, sink.DocID("public.docs", fmt.Sprint(all[i].key)))
	}
	return out
}

func hitDocs(hits []sink.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.DocID
	}
	return out
}

func recall(got, want []string) float64 {
	if len(want) == 0 {
		return 1
	}
	n := 0
	for _, w := range want {
		if slices.Contains(got, w) {
			n++
		}
	}
	return float64(n) / float64(len(want))
}

// usesHNSW reports whether the plan of the search uses index's HNSW
// index once the alternatives are priced out (on a table this small the
// planner would rather sort): the query's ORDER BY must be exactly the
// index's expression for the index to be usable at all.
func usesHNSW(t *testing.T, pool *pgxpool.Pool, s *sink.Store, index string, vec []float32, q sink.Query) bool {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
	require.NoError(t, err)
	sql, args := sink.SearchSQLForTest(s, vec, q)
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, args...)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, line := range plan {
		if strings.Contains(line, "Index Scan using chunks_hnsw_"+index+" ") {
			return true
		}
	}
	for _, line := range plan {
		if len(line) > 160 {
			line = line[:160] + "..."
		}
		t.Log(line)
	}
	return false
}

// Each vector type end to end: create, upsert, search (recall against an
// exhaustive search, filters), edit, delete, the stored columns, the view,
// the catalog, every reader of the stored vectors, and a reopen asking
// another type.
func TestVectorTypesEndToEnd(t *testing.T) {
	const d, n = 128, 600
	texts := typedCorpus(n+1, 1)
	vecs := denseAll(t, d, texts)
	for _, typ := range sink.VectorTypes {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			pool, schema := pgtest.Schema(t)
			ctx := context.Background()
			s := openTyped(t, pool, schema, "docs", typ, d, sink.Write)
			require.Equal(t, typ, s.Identity().Type)
			byKey := map[int][]float32{}
			for i := 0; i < n; i++ {
				_, err := s.Upsert(ctx, typedDoc(i, 1, texts[i], vecs[i]))
				require.NoError(t, err)
				byKey[i] = vecs[i]
			}

			// Every document's own text finds it first; the top 10 finds
			// what an exhaustive cosine search finds.
			var sum float64
			queries := 0
			for i := 0; i < n; i += 10 {
				q := sink.Query{K: 10, Tenant: typedTenant(i)}
				hits, err := s.Search(ctx, vecs[i], q)
				require.NoError(t, err)
				require.NotEmpty(t, hits)
				require.Equal(t, sink.DocID("public.docs", fmt.Sprint(i)), hits[0].DocID, "query %d", i)
				require.InDelta(t, 1, hits[0].Score, 1e-3)
				want := exactTop(vecs[i], byKey, func(k int) bool { return typedTenant(k) == q.Tenant }, 10)
				sum += recall(hitDocs(hits), want)
				queries++
				for _, h := range hits {
					require.Equal(t, q.Tenant, typedTenant(mustAtoi(t, h.Key)), "tenant filter: %s", h.DocID)
				}
			}
			rec := sum / float64(queries)
			t.Logf("%s: recall@10 against exhaustive cosine %.3f over %d queries", typ, rec, queries)
			require.GreaterOrEqual(t, rec, 0.95)

			// A metadata filter with the tenant: every hit passes both, and
			// the filter does not starve the result below K.
			q := sink.Query{K: 10, Tenant: "t1", Filter: map[string]any{"lang": "de"}}
			hits, err := s.Search(ctx, vecs[1], q)
			require.NoError(t, err)
			require.Len(t, hits, 10)
			for _, h := range hits {
				key := mustAtoi(t, h.Key)
				require.Equal(t, "t1", typedTenant(key))
				require.Equal(t, "de", h.Metadata["lang"])
			}
			want := exactTop(vecs[1], byKey, func(k int) bool { return typedTenant(k) == "t1" && typedLang(k) == "de" }, 10)
			require.GreaterOrEqual(t, recall(hitDocs(hits), want), 0.9)

			// The plan uses the HNSW index: the query's expression is the
			// index's.
			require.True(t, usesHNSW(t, pool, s, "docs", vecs[2], sink.Query{K: 5, Tenant: "t0", Filter: map[string]any{"lang": "en"}}))

			// Edit: document 0 gets a new text; delete: document 1 is gone.
			_, err = s.Upsert(ctx, typedDoc(0, 2, texts[n], vecs[n]))
			require.NoError(t, err)
			hits, err = s.Search(ctx, vecs[n], sink.Query{K: 3, Tenant: "t0"})
			require.NoError(t, err)
			require.Equal(t, "public.docs/0", hits[0].DocID)
			require.Equal(t, texts[n], hits[0].Text)
			_, err = s.Delete(ctx, "public.docs", "1", ver(2), docTime)
			require.NoError(t, err)
			hits, err = s.Search(ctx, vecs[1], sink.Query{K: 10, Tenant: "t1"})
			require.NoError(t, err)
			require.NotContains(t, hitDocs(hits), "public.docs/1")
			byKey[0] = vecs[n]

			// Storage: a halfvec index fills embedding_half only.
			var full, half int
			halfCol := "0"
			if typ == sink.TypeHalfvec {
				halfCol = "count(embedding_half)"
			}
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(embedding), "+halfCol+" FROM "+schema+".chunks WHERE index_name = 'docs'").Scan(&full, &half))
			if typ == sink.TypeHalfvec {
				require.Equal(t, [2]int{0, n}, [2]int{full, half})
			} else {
				require.Equal(t, [2]int{n, 0}, [2]int{full, half})
			}

			// The cache holds the given vectors exactly, whatever the
			// index stores.
			cached, err := s.Vectors(ctx, []string{"h0-2", "h5-1"})
			require.NoError(t, err)
			require.Equal(t, vecs[n], cached["h0-2"])
			require.Equal(t, vecs[5], cached["h5-1"])

			// Every reader of the stored vectors reads full-precision
			// vectors of the right values (halfvec: rounded to 2 bytes).
			tol := 0.0
			if typ == sink.TypeHalfvec {
				tol = 1e-3
			}
			cvs, err := s.ChunkVectors(ctx, nil)
			require.NoError(t, err)
			require.Len(t, cvs, n)
			byText := map[string][]float32{}
			for i, tx := range texts {
				byText[tx] = vecs[i]
			}
			for _, cv := range cvs {
				requireClose(t, byText[cv.Text], cv.Vector, tol)
			}
			require.NoError(t, s.EachLiveContent(ctx, func(id string, cs []sink.LiveChunk) error {
				for _, c := range cs {
					requireClose(t, byText[c.Text], c.Vector, tol)
				}
				return nil
			}))
			ms := sink.NewMonitorState(pool, schema, "docs", embedder.HashingModel, d)
			ids, mv, err := ms.ChunkVectors(ctx, 0, 5, false)
			require.NoError(t, err)
			require.Len(t, ids, 5)
			require.Len(t, mv[0], d)
			sampled, err := ms.UniformAt(ctx, []int64{ids[0], ids[3]})
			require.NoError(t, err)
			require.Len(t, sampled, 2)
			for _, c := range sampled {
				requireClose(t, byText[c.Text], c.Vector, tol)
			}
			cachedOld, err := ms.CachedOldest(ctx, 3)
			require.NoError(t, err)
			require.NotEmpty(t, cachedOld)
			for _, c := range cachedOld {
				requireClose(t, byText[c.Text], c.Vector, tol)
			}
			rv, _, err := ms.RandomVectors(ctx, 3)
			require.NoError(t, err)
			require.Len(t, rv, 3)

			// The view: embedding is the HNSW index's type; a bit index's
			// view adds the quantized vector.
			cols := viewTypes(t, pool, schema, sink.IndexView("docs"))
			switch typ {
			case sink.TypeHalfvec:
				require.Equal(t, "halfvec(128)", cols["embedding"])
			default:
				require.Equal(t, "vector(128)", cols["embedding"])
			}
			if typ == sink.TypeBit {
				require.Equal(t, "bit(128)", cols["embedding_bit"])
			} else {
				require.NotContains(t, cols, "embedding_bit")
			}
			var viewN int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+"."+sink.IndexView("docs")+" WHERE embedding IS NOT NULL").Scan(&viewN))
			require.Equal(t, n-1, viewN, "live chunks, each with its vector")

			// The catalog.
			stats, _, err := sink.NewCatalog(pool, schema).List(ctx, "docs")
			require.NoError(t, err)
			require.Len(t, stats, 1)
			require.Equal(t, typ, stats[0].Type)
			require.Equal(t, sink.HNSW{M: 16, EfConstruction: 64, EfSearch: 40}, stats[0].HNSW)
			require.Positive(t, stats[0].HNSWBytes)

			// A reader takes the recorded type.
			r, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: schema, Index: "docs"})
			require.NoError(t, err)
			require.Equal(t, typ, r.Identity().Type)
			hits, err = r.Search(ctx, vecs[4], sink.Query{K: 1, Tenant: "t0"})
			require.NoError(t, err)
			require.Equal(t, "public.docs/4", hits[0].DocID)

			// Asking an existing index for another type names the fix.
			other := sink.TypeVector
			if typ == sink.TypeVector {
				other = sink.TypeHalfvec
			}
			_, err = sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: embedder.HashingModel, Dimensions: d, Type: other})
			require.ErrorIs(t, err, sink.ErrIndexMismatch)
			require.ErrorContains(t, err, "ragsync reindex --to NAME --index-type "+string(other))
			// Not asking keeps the recorded type.
			again, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: embedder.HashingModel, Dimensions: d})
			require.NoError(t, err)
			require.Equal(t, typ, again.Identity().Type)
		})
	}
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err)
	return n
}

func requireClose(t testing.TB, want, got []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	if tol == 0 {
		require.Equal(t, want, got)
		return
	}
	for i := range want {
		require.InDelta(t, want[i], got[i], tol, "dimension %d", i)
	}
}

// viewTypes is the SQL type of each column of view.
func viewTypes(t testing.TB, pool *pgxpool.Pool, schema, view string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"+
		" WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped", pgx.Identifier{schema, view}.Sanitize())
	require.NoError(t, err)
	out := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error { out[name] = typ; return nil })
	require.NoError(t, err)
	return out
}

// A halfvec index writes its rows in a bulk load (both COPY paths) and
// rewrites them (repair), always into embedding_half; the cache keeps the
// full vectors.
func TestVectorTypesBulkAndRewrite(t *testing.T) {
	const d, n = 64, 50
	texts := typedCorpus(n+1, 2)
	vecs := embedAll(t, d, texts)
	for _, typ := range sink.VectorTypes {
		for _, skipFullText := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/skip_full_text=%v", typ, skipFullText), func(t *testing.T) {
				t.Parallel()
				pool, schema := pgtest.Schema(t)
				ctx := context.Background()
				s, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Bulk, Schema: schema, Index: "docs", Model: embedder.HashingModel,
					Dimensions: d, Type: typ, SkipFullText: skipFullText})
				require.NoError(t, err)
				require.Equal(t, sink.Bulk, s.Mode())
				for i := 0; i < n; i++ {
					_, err := s.Upsert(ctx, typedDoc(i, 1, texts[i], vecs[i]))
					require.NoError(t, err)
				}
				require.NoError(t, s.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1}))
				for i := 0; i < n; i += 7 {
					hits, err := s.Search(ctx, vecs[i], sink.Query{K: 1, Tenant: typedTenant(i)})
					require.NoError(t, err)
					require.Equal(t, sink.DocID("public.docs", fmt.Sprint(i)), hits[0].DocID)
				}
				cached, err := s.Vectors(ctx, []string{"h3-1"})
				require.NoError(t, err)
				require.Equal(t, vecs[3], cached["h3-1"])

				// Rewrite chunk of document 3 with another vector.
				var id int64
				require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+schema+".chunks WHERE doc_id = 'public.docs/3'").Scan(&id))
				rewritten, err := s.RewriteVectors(ctx, []sink.Rewrite{{ChunkID: id, Hash: "h3-1", Text: texts[3], Vector: vecs[n]}}, false)
				require.NoError(t, err)
				require.Equal(t, 1, rewritten)
				cvs, err := s.ChunkVectors(ctx, []int64{id})
				require.NoError(t, err)
				tol := 0.0
				if typ == sink.TypeHalfvec {
					tol = 1e-3
				}
				requireClose(t, vecs[n], cvs[0].Vector, tol)
				cached, err = s.Vectors(ctx, []string{"h3-1"})
				require.NoError(t, err)
				require.Equal(t, vecs[n], cached["h3-1"])
				hits, err := s.Search(ctx, vecs[n], sink.Query{K: 1, Tenant: "t1"})
				require.NoError(t, err)
				require.Equal(t, "public.docs/3", hits[0].DocID)

				// An edit re-using a cached vector (nil Vector) stores it
				// in the index's column too.
				d5 := typedDoc(5, 2, texts[3], nil)
				d5.Chunks[0].Hash = "h3-1"
				_, err = s.Upsert(ctx, d5)
				require.NoError(t, err)
				var n5 int
				col := "embedding"
				if typ == sink.TypeHalfvec {
					col = "embedding_half"
				}
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".chunks WHERE doc_id = 'public.docs/5' AND "+col+" IS NOT NULL").Scan(&n5))
				require.Equal(t, 1, n5)
			})
		}
	}
}

// halfvec and bit hold vectors beyond vector's 2,000 dimensions: a
// 3,072-dimension index of each writes and finds its documents.
func TestVectorTypesLargeDimensions(t *testing.T) {
	const d, n = 3072, 40
	texts := typedCorpus(n, 3)
	vecs := embedAll(t, d, texts)
	for _, typ := range []sink.VectorType{sink.TypeHalfvec, sink.TypeBit} {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			pool, schema := pgtest.Schema(t)
			ctx := context.Background()
			s := openTyped(t, pool, schema, "large", typ, d, sink.Write)
			for i := 0; i < n; i++ {
				_, err := s.Upsert(ctx, typedDoc(i, 1, texts[i], vecs[i]))
				require.NoError(t, err)
			}
			for i := 0; i < n; i += 3 {
				hits, err := s.Search(ctx, vecs[i], sink.Query{K: 5, Tenant: typedTenant(i)})
				require.NoError(t, err)
				require.Equal(t, sink.DocID("public.docs", fmt.Sprint(i)), hits[0].DocID)
			}
			require.True(t, usesHNSW(t, pool, s, "large", vecs[0], sink.Query{K: 5, Tenant: "t0"}))
			cached, err := s.Vectors(ctx, []string{"h1-1"})
			require.NoError(t, err)
			require.Equal(t, vecs[1], cached["h1-1"])
		})
	}
}

// Dimensions beyond a type's limit are refused before anything is
// written, naming the types that hold them.
func TestVectorTypeDimensionLimits(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	open := func(typ sink.VectorType, d int) error {
		_, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "big", Model: "m", Dimensions: d, Type: typ})
		return err
	}
	err := open("", 3072)
	require.ErrorIs(t, err, sink.ErrInvalidConfig)
	require.ErrorContains(t, err, "embedder.dimensions: 3072 is more than index_type vector allows (2000): set index_type: halfvec (up to 4000) or bit (up to 16000), or ask the model for fewer dimensions")
	err = open(sink.TypeHalfvec, 4001)
	require.ErrorIs(t, err, sink.ErrInvalidConfig)
	require.ErrorContains(t, err, "4001 is more than index_type halfvec allows (4000): set index_type: bit (up to 16000)")
	err = open(sink.TypeBit, 16001)
	require.ErrorContains(t, err, "16001 is more than index_type bit allows (16000)")
	err = open("ivfflat", 8)
	require.ErrorIs(t, err, sink.ErrInvalidConfig)
	require.ErrorContains(t, err, `"ivfflat" is not a vector type: set vector (up to 2000 dimensions), halfvec (up to 4000) or bit (up to 16000)`)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".indexes").Scan(&n))
	require.Zero(t, n, "nothing registered")
	require.NoError(t, open(sink.TypeVector, 2000))
}

func TestParseVectorType(t *testing.T) {
	for in, want := range map[string]sink.VectorType{"": sink.TypeVector, "vector": sink.TypeVector, "halfvec": sink.TypeHalfvec, "bit": sink.TypeBit} {
		got, err := sink.ParseVectorType(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := sink.ParseVectorType("Halfvec")
	require.ErrorContains(t, err, "halfvec")
	require.Equal(t, []int{2000, 4000, 16000}, []int{sink.MaxDimensionsFor(sink.TypeVector), sink.MaxDimensionsFor(sink.TypeHalfvec), sink.MaxDimensionsFor(sink.TypeBit)})
	require.Equal(t, sink.HNSW{M: 16, EfConstruction: 64, EfSearch: 40}, sink.HNSW{}.WithDefaults())
	require.Equal(t, sink.HNSW{M: 8, EfConstruction: 64, EfSearch: 100}, sink.HNSW{M: 8, EfSearch: 100}.WithDefaults())
}

// halfvec and bit need pgvector 0.7; an older server is refused naming the
// update command, and vector never needs it.
func TestHalfvecNeedsPgvector07(t *testing.T) {
	for _, v := range []string{"0.5.1", "0.6.2", "0.6.0-dev", "x"} {
		err := sink.HalfvecSupportForTest(sink.TypeHalfvec, v)
		require.ErrorIs(t, err, sink.ErrInvalidConfig, v)
		require.ErrorContains(t, err, "ALTER EXTENSION vector UPDATE", v)
		require.ErrorContains(t, err, "the server has "+v, v)
	}
	for _, v := range []string{"0.7.0", "0.8.0", "0.10.1", "1.0.0"} {
		require.NoError(t, sink.HalfvecSupportForTest(sink.TypeBit, v), v)
	}
}

// The HNSW build parameters are fixed at creation and recorded; the query
// settings are recorded by a writer's explicit value and read by readers.
func TestHNSWParametersRecorded(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	const d = 32
	cfg := sink.Config{Mode: sink.Write, Schema: schema, Index: "tuned", Model: "m", Dimensions: d, Type: sink.TypeBit,
		HNSW: sink.HNSW{M: 8, EfConstruction: 40, EfSearch: 64}, Candidates: 300}
	s, err := sink.OpenIndex(ctx, pool, cfg)
	require.NoError(t, err)
	require.Equal(t, sink.HNSW{M: 8, EfConstruction: 40, EfSearch: 64}, s.Identity().HNSW)
	require.Equal(t, 300, s.Identity().Candidates)
	var def string
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_indexdef(to_regclass($1))", schema+".chunks_hnsw_tuned").Scan(&def))
	require.Contains(t, def, "binary_quantize(embedding))::bit(32)")
	require.Contains(t, def, "bit_hamming_ops")
	require.Contains(t, def, "WITH (m='8', ef_construction='40')")
	require.Contains(t, def, "WHERE (index_name = 'tuned'::text)")

	// Another build parameter is refused, naming reindex.
	bad := cfg
	bad.HNSW.M = 16
	_, err = sink.OpenIndex(ctx, pool, bad)
	require.ErrorIs(t, err, sink.ErrIndexMismatch)
	require.ErrorContains(t, err, "ragsync reindex --to NAME --index-type bit --hnsw-m 16 --hnsw-ef-construction 40")

	// A writer without them keeps them; its explicit query settings are
	// recorded, and a reader uses them.
	w, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "tuned", Model: "m", Dimensions: d,
		HNSW: sink.HNSW{EfSearch: 120}, Candidates: 500})
	require.NoError(t, err)
	require.Equal(t, sink.HNSW{M: 8, EfConstruction: 40, EfSearch: 120}, w.Identity().HNSW)
	r, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: schema, Index: "tuned"})
	require.NoError(t, err)
	require.Equal(t, sink.HNSW{M: 8, EfConstruction: 40, EfSearch: 120}, r.Identity().HNSW)
	require.Equal(t, 500, r.Identity().Candidates)
	x, err := sink.NewCatalog(pool, schema).Indexes(ctx)
	require.NoError(t, err)
	require.Equal(t, sink.TypeBit, x[0].Type)
	require.Equal(t, 500, x[0].Candidates)
	// A search asks for more candidates than the recorded number when K is
	// larger; the SQL takes the recorded number otherwise.
	sql, _ := sink.SearchSQLForTest(r, make([]float32, d), sink.Query{K: 10})
	require.Contains(t, sql, "LIMIT 500)")
	sql, _ = sink.SearchSQLForTest(r, make([]float32, d), sink.Query{K: 600})
	require.Contains(t, sql, "LIMIT 600)")

	// A vector index ignores candidates.
	v, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "plain", Model: "m", Dimensions: d, Create: true, Candidates: 50})
	require.NoError(t, err)
	require.Zero(t, v.Identity().Candidates)
}

// The recall of a bit index with the default candidates and with 400,
// beside a vector index's over the same documents, on dense vectors of a
// set larger than the candidates (so the bit index must choose): logged,
// bounded below, and more candidates find more.
func TestBitRecallWithDefaultCandidates(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 2,000 documents twice")
	}
	const d, n = 256, 2000
	texts := typedCorpus(n, 4)
	vecs := denseAll(t, d, texts)
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	byKey := map[int][]float32{}
	for i := 0; i < n; i++ {
		byKey[i] = vecs[i]
	}
	load := func(index string, typ sink.VectorType) *sink.Store {
		s := openTyped(t, pool, schema, index, typ, d, sink.Bulk)
		for i := 0; i < n; i++ {
			_, err := s.Upsert(ctx, typedDoc(i, 1, texts[i], vecs[i]))
			require.NoError(t, err)
		}
		require.NoError(t, s.Finish(ctx, sink.BuildOptions{MaintenanceWorkMem: "64MB", ParallelWorkers: 1}))
		return s
	}
	stores := map[string]*sink.Store{"bit": load("bits", sink.TypeBit), "vector": load("vecs", sink.TypeVector)}
	// The same bit index read with 400 candidates: more candidates buy
	// back the recall quantization loses.
	wide, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: schema, Index: "bits", Candidates: 400})
	require.NoError(t, err)
	stores["bit400"] = wide
	// Queries are texts near documents, not documents: a document's text
	// with its last words replaced.
	queries := typedCorpus(n+50, 4)[n:]
	recalls := map[string]float64{}
	for typ, s := range stores {
		var sum float64
		start := time.Now()
		for i, q := range queries {
			words := strings.Fields(texts[i*37%n])
			qt := strings.Join(append(words[:8], strings.Fields(q)[:4]...), " ")
			qv := denseAll(t, d, []string{qt})[0]
			tenant := typedTenant(i)
			hits, err := s.Search(ctx, qv, sink.Query{K: 10, Tenant: tenant})
			require.NoError(t, err)
			sum += recall(hitDocs(hits), exactTop(qv, byKey, func(k int) bool { return typedTenant(k) == tenant }, 10))
		}
		recalls[typ] = sum / float64(len(queries))
		t.Logf("%s, %d dims, %d documents: recall@10 %.3f against exhaustive cosine (%s for %d queries)",
			typ, d, n, recalls[typ], time.Since(start), len(queries))
	}
	t.Logf("bit with the default candidates (%d for k 10) finds %.2f of what vector finds, with 400 %.2f",
		sink.DefaultCandidates(10), recalls["bit"]/recalls["vector"], recalls["bit400"]/recalls["vector"])
	// This corpus is a hard case: random words from a small vocabulary, so
	// the exact top 10 beyond the first few are near ties, which one bit a
	// dimension cannot order (on real text the default finds 0.99–1.04 of
	// vector's: bench/sizing).
	require.GreaterOrEqual(t, recalls["vector"], 0.9)
	require.GreaterOrEqual(t, recalls["bit"], 0.8*recalls["vector"])
	require.GreaterOrEqual(t, recalls["bit400"], 0.95*recalls["vector"])
	require.Greater(t, recalls["bit400"], recalls["bit"])
}

// denseAll embeds texts like a model would: dense vectors of d dimensions,
// each the hashing embedder's vector at 1,024 dimensions (a sparse bag of
// hashed words, a poor case for binary quantization and unlike a model's)
// times a fixed seeded Gaussian matrix, normalised. Cosines stay close to
// the hashing vectors', and every dimension carries signal, as in a
// model's embedding.
func denseAll(t testing.TB, d int, texts []string) [][]float32 {
	t.Helper()
	const base = 1024
	sparse := embedAll(t, base, texts)
	r := rand.New(rand.NewPCG(11, uint64(d)))
	proj := make([]float32, base*d)
	for i := range proj {
		proj[i] = float32(r.NormFloat64())
	}
	out := make([][]float32, len(sparse))
	for i, v := range sparse {
		w := make([]float32, d)
		for j, x := range v {
			if x == 0 {
				continue
			}
			row := proj[j*d : (j+1)*d]
			for k := range w {
				w[k] += x * row[k]
			}
		}
		var norm float64
		for _, x := range w {
			norm += float64(x) * float64(x)
		}
		for k := range w {
			w[k] = float32(float64(w[k]) / math.Sqrt(norm))
		}
		out[i] = w
	}
	return out
}

// An alias's view follows its target's type through promote and rollback:
// its embedding column changes type with the target.
func TestAliasViewFollowsVectorType(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	openTyped(t, pool, schema, "docs_v1", sink.TypeVector, 8, sink.Write)
	openTyped(t, pool, schema, "docs_v2", sink.TypeHalfvec, 8, sink.Write)
	openTyped(t, pool, schema, "docs_v3", sink.TypeBit, 8, sink.Write)
	cat := sink.NewCatalog(pool, schema)
	view := sink.AliasView("docs")
	_, err := cat.Promote(ctx, "docs", "docs_v1", true)
	require.NoError(t, err)
	require.Equal(t, "vector(8)", viewTypes(t, pool, schema, view)["embedding"])
	_, err = cat.Promote(ctx, "docs", "docs_v2", true)
	require.NoError(t, err)
	require.Equal(t, "halfvec(8)", viewTypes(t, pool, schema, view)["embedding"])
	_, err = cat.Promote(ctx, "docs", "docs_v3", true)
	require.NoError(t, err)
	cols := viewTypes(t, pool, schema, view)
	require.Equal(t, "vector(8)", cols["embedding"])
	require.Equal(t, "bit(8)", cols["embedding_bit"])
	_, err = cat.Rollback(ctx, "docs")
	require.NoError(t, err)
	cols = viewTypes(t, pool, schema, view)
	require.Equal(t, "halfvec(8)", cols["embedding"])
	require.NotContains(t, cols, "embedding_bit")
	// The alias opens its target with the target's type, whatever the
	// configuration asks.
	s, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "other", Dimensions: 3, Type: sink.TypeBit})
	require.NoError(t, err)
	require.Equal(t, sink.Identity{Name: "docs_v2", Alias: "docs", Model: embedder.HashingModel, Dimensions: 8, FullText: true, Type: sink.TypeHalfvec,
		HNSW: sink.HNSW{}.WithDefaults()}, s.Identity())
}

// With the HNSW index forced, a selective filter still yields K hits of
// each type: the bit index's candidates are taken with the filter applied
// by the iterative scan, not filtered after the candidates were cut.
func TestVectorTypesFilteredThroughHNSWReturnK(t *testing.T) {
	const d, n = 64, 1000
	texts := typedCorpus(n, 5)
	vecs := embedAll(t, d, texts)
	for _, typ := range sink.VectorTypes {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			pool, schema := pgtest.Schema(t)
			ctx := context.Background()
			cfg := pool.Config()
			cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
			cfg.ConnConfig.RuntimeParams["enable_sort"] = "off"
			cfg.ConnConfig.RuntimeParams["enable_bitmapscan"] = "off"
			forced, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(forced.Close)
			// Written through the usual pool (the forced settings make the
			// writes' own queries slow), searched through the forced one.
			w := openTyped(t, pool, schema, "docs", typ, d, sink.Write)
			byKey := map[int][]float32{}
			rare := func(k int) bool { return k%100 == 7 }
			for i := 0; i < n; i++ {
				doc := typedDoc(i, 1, texts[i], vecs[i])
				if rare(i) {
					doc.Tenant = "rare"
					byKey[i] = vecs[i]
				}
				_, err := w.Upsert(ctx, doc)
				require.NoError(t, err)
			}
			_, err = forced.Exec(ctx, "ANALYZE "+schema+".chunks")
			require.NoError(t, err)
			s, err := sink.OpenIndex(ctx, forced, sink.Config{Mode: sink.Read, Schema: schema, Index: "docs"})
			require.NoError(t, err)
			q := sink.Query{K: 5, Tenant: "rare"}
			require.True(t, usesHNSW(t, forced, s, "docs", vecs[3], q), "the test must exercise the HNSW path")
			hits, err := s.Search(ctx, vecs[3], q)
			require.NoError(t, err)
			require.Equal(t, exactTop(vecs[3], byKey, rare, 5), hitDocs(hits))
		})
	}
}
