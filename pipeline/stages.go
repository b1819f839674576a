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

// Splitter cuts a document's text into chunks.
type Splitter interface {
	Split(text string) []chunker.Chunk
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

// Sink stores documents and their chunks. ChunkStore is part of it, not a
// capability discovered by type assertion: a decorator that wraps the sink
// (serve's front door wrapper) once hid it and silently turned off
// near-duplicate reuse and edit measurement.
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
