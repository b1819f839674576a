package pipeline

import (
	"context"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// Source yields batches. Fetch returns io.EOF when a finite source (a file
// replayed with --once) is exhausted. Fetch is called again before earlier
// batches are acknowledged, from one goroutine; a batch's Ack is called
// once every change of it and of every earlier batch of its Lane was
// applied, in fetch order within the lane, after Stages.Commit (see
// cdc.Batch).
type Source interface {
	Fetch(ctx context.Context) (cdc.Batch, error)
}

// Decoder turns a message into a change.
type Decoder interface {
	Decode(m cdc.Message) (cdc.Change, error)
}

// Splitter cuts a document's text in chunks. Refine cuts finer every
// chunk keep rejects (chunker.Chunker.Refine); the pipeline calls it on an
// update with the hashes the document has stored, so the regions that
// change are held in small chunks. A Splitter that does not refine returns
// chunks unchanged.
type Splitter interface {
	Split(text string) []chunker.Chunk
	Refine(chunks []chunker.Chunk, keep func(hash string) bool) []chunker.Chunk
}

// Embedder computes one vector per text, in order. EmbedCounted is Embed
// given the chunker's token count of every text (tokens[i] counts
// texts[i]; nil: count them), so that the embedder does not count again,
// which was most of the CPU of a load; the pipeline always calls it. It is
// part of the interface, not a capability discovered by type assertion,
// so a decorator cannot hide it: an embedder that does not count simply
// ignores tokens.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error)
}

// Observer hears of every write the pipeline makes to its Sink (not to
// its shadows), for a reader that keeps its own view of the index in step
// (the query front door's Bloom filters, document map and cache
// generation). Upserting is called before the write: its failure fails
// the write, which is retried, so the observer never misses a document in
// the index. Upserted, Deleted and Truncated are called after the sink
// committed, not for a stale change (its tenant is not the document's):
// a failure fails the change, which is retried, and the sink answers the
// replay as a duplicate, which is reported again.
type Observer interface {
	Upserting(ctx context.Context, tenant, docID string) error
	Upserted(ctx context.Context, tenant, docID string) error
	Deleted(ctx context.Context, docID string) error
	Truncated(ctx context.Context, table string) error
}

// Sink stores documents and their chunks. ChunkStore is part of it, not a
// capability discovered by type assertion: a decorator wrapping the sink
// would hide it and silently turn off near-duplicate reuse and edit
// measurement. (A reader that must follow the writes is an Observer, not
// a decorator.)
type Sink interface {
	Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error)
	Delete(ctx context.Context, table, key string, v cdc.Version, ts time.Time) (sink.Outcome, error)
	Truncate(ctx context.Context, table string, v cdc.Version, ts time.Time) (int, error)
	Vectors(ctx context.Context, hashes []string) (map[string][]float32, error)
	Document(ctx context.Context, id string) (sink.StoredDocument, bool, error)
	ChunkStore
}

// DeadLetters keeps messages that can never be applied, with the reason.
type DeadLetters interface {
	Put(ctx context.Context, m cdc.Message, cause error) error
}

// VectorCache keeps embeddings by content hash. The pipeline writes each
// slice of a document's new vectors to it as soon as they are computed, so
// a large document holds few vectors at a time and a failure after
// embedding pays nothing twice; the sink then takes them from the cache.
// Cached tells which hashes have a cached vector without reading them.
type VectorCache interface {
	CacheVectors(ctx context.Context, hashes, texts []string, vecs [][]float32) error
	Cached(ctx context.Context, hashes []string) (map[string]bool, error)
}

// DocumentLookup reads in one round trip what the pipeline needs of a
// document before embedding it: the stored document, its stored chunks
// and which content hashes have a cached vector (sink.Store.Lookup), which
// Sink.Document, ChunkStore.StoredChunks and VectorCache.Cached read in
// three round trips.
type DocumentLookup interface {
	Lookup(ctx context.Context, id string, hashes []string) (sink.Lookup, error)
}
