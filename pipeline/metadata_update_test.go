package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// splitCounter is the chunker, counting the texts it is asked to cut.
type splitCounter struct {
	*chunker.Chunker
	splits atomic.Int32
}

func (s *splitCounter) Split(text string) []chunker.Chunk {
	s.splits.Add(1)
	return s.Chunker.Split(text)
}

// callCounter is countingEmbedder, counting its calls as well as texts.
type callCounter struct {
	*countingEmbedder
	calls atomic.Int32
}

func (e *callCounter) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.calls.Add(1)
	return e.countingEmbedder.Embed(ctx, texts)
}

func (e *callCounter) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// mdTables renders body as the text; status is not rendered, and the
// declared field semantic_tag renders it into the metadata.
var mdTables = []pipeline.TableConfig{{Match: "public.docs", ID: []string{"id"}, Text: "{{body}}",
	Fields: map[string]string{"semantic_tag": "{{status}}"}}}

func mdEvent(op string, id int, lsn int64, body, status string) cdc.Record {
	return debeziumtest.Message("docs", op, id, lsn, map[string]any{"body": body, "status": status})
}

type mdBench struct {
	pool   *pgxpool.Pool
	schema string
	store  *sink.Store
	emb    *callCounter
	split  *splitCounter
}

func (b *mdBench) run(t *testing.T, msgs ...cdc.Record) pipeline.Snapshot {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Tables: mdTables, Workers: 4, RetryBackoff: 1, MaxRetryBackoff: 2},
		pipeline.Stages{Source: &sliceSource{batches: [][]cdc.Record{msgs}}, Splitter: b.split,
			Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb}})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p.Stats()
}

type chunkRow struct {
	id         int64
	hash, text string
}

// chunkRows are the document's chunk rows in position order.
func (b *mdBench) chunkRows(t *testing.T, doc string) []chunkRow {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT id, content_hash, text FROM "+pgx.Identifier{b.schema, "chunks"}.Sanitize()+
		" WHERE index_name = 'docs' AND doc_id = $1 ORDER BY position", doc)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (chunkRow, error) {
		var c chunkRow
		return c, r.Scan(&c.id, &c.hash, &c.text)
	})
	require.NoError(t, err)
	return out
}

func (b *mdBench) lastChunk(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT coalesce(max(id), 0) FROM "+pgx.Identifier{b.schema, "chunks"}.Sanitize()).Scan(&n))
	return n
}

// An update that changes only a column a declared field renders (the text
// is unchanged) is written as a metadata-only update: nothing is cut,
// embedded or inserted, the chunk rows stay as they were, and the new
// value is in the document's metadata. A text edit of the same document
// after it, and another metadata-only update after that in the same batch,
// apply in source order, and a replay of the first update is stale.
func TestMetadataOnlyUpdateEmbedsAndInsertsNothing(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	b := &mdBench{pool: pool, schema: schema, store: st, emb: &callCounter{countingEmbedder: &countingEmbedder{}}, split: &splitCounter{Chunker: ch}}
	const doc = "public.docs/1"
	ab, ac := paraA+"\n\n"+paraB, paraA+"\n\n"+paraC

	b.run(t, mdEvent("c", 1, 10, ab, "draft"), mdEvent("c", 2, 11, paraB, "draft"))
	before := b.chunkRows(t, doc)
	require.NotEmpty(t, before)
	last, calls, texts := b.lastChunk(t), b.emb.calls.Load(), len(b.emb.embedded())
	b.split.splits.Store(0)

	update := mdEvent("u", 1, 20, ab, "published")
	stats := b.run(t, update)
	require.Equal(t, 1, stats["metadata_only"], "the update is written as a metadata-only update")
	require.Zero(t, b.split.splits.Load(), "a metadata-only update cuts nothing")
	require.Equal(t, calls, b.emb.calls.Load(), "a metadata-only update makes no embedding call")
	require.Len(t, b.emb.embedded(), texts)
	require.Equal(t, before, b.chunkRows(t, doc), "the chunk rows are the same rows")
	require.Equal(t, last, b.lastChunk(t), "no chunk row is inserted")
	d, ok, err := st.Document(t.Context(), doc)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "published", d.Metadata["semantic_tag"])
	require.Equal(t, "published", d.Row["status"])
	require.Zero(t, d.Version.Compare(cdc.Decode(testDecoder, update).Change.Version), "the stored version is the update's")

	// A text edit, then a metadata-only update, then a replay of the first
	// metadata-only update: in source order, the replay stale.
	texts = len(b.emb.embedded())
	stats = b.run(t, mdEvent("u", 1, 30, ac, "published"), mdEvent("u", 1, 40, ac, "archived"), mdEvent("u", 1, 20, ab, "published"))
	require.Equal(t, 1, stats["metadata_only"], "the update after the text edit is metadata-only")
	require.Positive(t, stats["stale"], "the replay is stale")
	d, ok, err = st.Document(t.Context(), doc)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "archived", d.Metadata["semantic_tag"])
	require.Equal(t, ac, d.Row["body"])
	var got []string
	for _, c := range b.chunkRows(t, doc) {
		got = append(got, c.text)
	}
	var want []string
	for _, c := range ch.Split(ac) {
		want = append(want, c.Text)
	}
	require.Equal(t, want, got, "the chunks are the text edit's")
	newTexts := b.emb.embedded()[texts:]
	require.NotEmpty(t, newTexts, "the text edit embeds its new chunk")
	for _, s := range newTexts {
		require.NotContains(t, s, "anemones", "the unchanged paragraph is not embedded again: %q", s)
	}
}

// rewritingIndex plays a concurrent writer: before a metadata-only write
// reaches the sink, it gives the stored document another render hash, as
// a writer that changed the text between the pipeline's fence read and
// the write would.
type rewritingIndex struct {
	pipeline.Index
	pool   *pgxpool.Pool
	schema string
	done   atomic.Bool
}

func (r *rewritingIndex) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	if d.MetadataOnly && r.done.CompareAndSwap(false, true) {
		if _, err := r.pool.Exec(ctx, "UPDATE "+pgx.Identifier{r.schema, "documents"}.Sanitize()+
			" SET render_hash = 'another text' WHERE id = $1", d.ID); err != nil {
			return sink.Outcome{}, err
		}
	}
	return r.Index.Upsert(ctx, d)
}

// A metadata-only update that finds, under the row lock, that the stored
// text is no longer the one it was decided by is written whole instead:
// cut and looked up again, its vectors taken from the cache (nothing
// embedded), its metadata and render hash those of the change.
func TestMetadataOnlyUpdateFallsBackWhenTheTextChanged(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	b := &mdBench{pool: pool, schema: schema, store: st, emb: &callCounter{countingEmbedder: &countingEmbedder{}}, split: &splitCounter{Chunker: ch}}
	const doc = "public.docs/1"
	ab := paraA + "\n\n" + paraB
	b.run(t, mdEvent("c", 1, 10, ab, "draft"))
	before, _, err := st.Document(t.Context(), doc)
	require.NoError(t, err)
	calls := b.emb.calls.Load()

	idx := &rewritingIndex{Index: st, pool: pool, schema: schema}
	p, err := pipeline.New(pipeline.Config{Tables: mdTables, Workers: 1, RetryBackoff: 1, MaxRetryBackoff: 2},
		pipeline.Stages{Source: &sliceSource{batches: [][]cdc.Record{{mdEvent("u", 1, 20, ab, "published")}}}, Splitter: b.split,
			Target: pipeline.Target{Name: "docs", Index: idx, Embedder: b.emb}})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.True(t, idx.done.Load(), "the metadata-only write was tried")

	stats := p.Stats()
	require.Zero(t, stats["metadata_only"], "the write under the lock saw another text")
	require.Equal(t, 1, stats["applied"])
	require.Equal(t, calls, b.emb.calls.Load(), "the chunks' vectors come from the cache")
	d, ok, err := st.Document(t.Context(), doc)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "published", d.Metadata["semantic_tag"])
	require.Equal(t, before.RenderHash, d.RenderHash, "the whole write stores the change's render hash")
	require.Equal(t, before.Hashes, d.Hashes)
}
