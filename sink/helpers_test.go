package sink_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

const dims = 4

type testBundle struct {
	pool   *pgxpool.Pool
	schema string
}

func setup(t testing.TB) (*sink.Store, *testBundle) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	s, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "articles", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	return s, &testBundle{pool: pool, schema: schema}
}

// ver is a Postgres version committed at the time doc() gives every
// document, as the decoder builds it (with the commit time).
func ver(n uint64) cdc.Version {
	return cdc.Version{Kind: "pg", Parts: []uint64{n}, TS: uint64(docTime.UnixMilli())}
}

var docTime = time.Unix(1700000000, 0).UTC()

// vecFor gives each content hash a distinct, deterministic unit-ish vector.
func vecFor(hash string) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(hash))
	x := h.Sum64()
	v := make([]float32, dims)
	for i := range v {
		v[i] = float32(int8(x>>(8*i))) + 0.5 // never all zero
	}
	return v
}

// chunks builds a chunk list from hashes in position order; the text is the
// hash so SearchText can find it.
func chunks(hashes ...string) []sink.Chunk {
	out := make([]sink.Chunk, len(hashes))
	for i, h := range hashes {
		out[i] = sink.Chunk{Position: i, Hash: h, Text: "text of " + h, Tokens: 3, Vector: vecFor(h)}
	}
	return out
}

func doc(key string, v uint64, cs []sink.Chunk) sink.Document {
	return sink.Document{
		Table: "public.articles", Key: key, Version: ver(v),
		SourceTS: docTime, Metadata: map[string]any{"lang": "en"},
		Row: map[string]any{"id": key}, Chunks: cs,
	}
}

// chunkRow is a stored chunk with its row version (xmin), which changes on
// any UPDATE of the row.
type chunkRow struct {
	Position int
	Hash     string
	Xmin     string
}

func chunkRows(t testing.TB, b *testBundle, docID string) []chunkRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		fmt.Sprintf("SELECT position, content_hash, xmin::text FROM %s.chunks WHERE doc_id = $1 ORDER BY position", b.schema), docID)
	require.NoError(t, err)
	defer rows.Close()
	var out []chunkRow
	for rows.Next() {
		var r chunkRow
		require.NoError(t, rows.Scan(&r.Position, &r.Hash, &r.Xmin))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func xminOf(rows []chunkRow, hash string) string {
	for _, r := range rows {
		if r.Hash == hash {
			return r.Xmin
		}
	}
	return ""
}

func hitIDs(hits []sink.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = fmt.Sprintf("%s#%d", h.DocID, h.Position)
	}
	return out
}
