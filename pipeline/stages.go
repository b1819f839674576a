package pipeline

import (
	"context"
	"errors"
	"fmt"
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

// Splitter cuts a document's text in chunks. Refine cuts finer every
// chunk keep rejects (chunker.Chunker.Refine); the pipeline calls it on an
// update with the hashes the document has stored, so the regions that
// change are held in small chunks. A Splitter that does not refine returns
// chunks unchanged.
type Splitter interface {
	Split(text string) []chunker.Chunk
	Refine(chunks []chunker.Chunk, keep func(hash string) bool) []chunker.Chunk
	// Fingerprint names the settings that decide the cuts (see
	// chunker.Config.Fingerprint): every chunk row records it, and a
	// document's stored render hash covers it, so a change of settings
	// re-chunks a document whose text is unchanged.
	Fingerprint() string
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
	// ReportedModel is the model name the provider gave in its last
	// answer ("" unknown): the chunks a write embeds record it.
	ReportedModel() string
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

// Index is the one write contract of an index: every method is required,
// so no combination of optional stages can change what a write does. The
// pipeline reads a document's stored state, chunks and cached hashes in one
// round trip (Lookup) once it is chunked, writes each slice of a large
// document's new vectors to the embedding cache as they are computed
// (CacheVectors), writes the document in one transaction (Upsert, Delete,
// Truncate), and calls Flush before any source position is acknowledged.
// A per-document-transaction index (sink's write mode) has nothing to
// flush; a buffering one (sink's bulk mode) makes its buffered rows durable
// there. Document reads the stored row first for a change whose unchanged
// TOAST columns need it before chunking; Fence reads an update's fence and
// render hash before chunking, so an update whose text is unchanged is
// written as a metadata-only Upsert without chunking (an update whose text
// changed is then chunked and looked up as any change); Cached asks about
// the pieces a refinement cut anew.
type Index interface {
	Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error)
	Delete(ctx context.Context, table, key string, v cdc.Version, ts time.Time) (sink.Outcome, error)
	Truncate(ctx context.Context, table string, v cdc.Version, ts time.Time) (int, error)
	Document(ctx context.Context, id string) (sink.StoredDocument, bool, error)
	Fence(ctx context.Context, id string) (sink.StoredDocument, bool, error)
	CacheVectors(ctx context.Context, hashes, texts []string, vecs [][]float32, modelVersion string) error
	Cached(ctx context.Context, hashes []string) (map[string]bool, error)
	Lookup(ctx context.Context, id string, hashes []string) (sink.Lookup, error)
	Flush(ctx context.Context) error
	// SaveMarks records the source's watermark (what it acknowledged,
	// which Flush made durable first) for readers that wait for their
	// own writes; a lane never moves back.
	SaveMarks(ctx context.Context, marks []cdc.Mark) error
}

// Target is an index the pipeline writes and the embedder of its model.
// The primary index and every shadow of its family are targets, and each
// goes through the same plan, embed and write path.
type Target struct {
	// Name identifies the index in logs and errors.
	Name string
	// Index is where the documents go.
	Index Index
	// Embedder embeds the chunks the index's cache lacks, with the
	// index's model and dimensions.
	Embedder Embedder
}

// check reports a target with a missing part.
func (t Target) check(role string) error {
	var errs []error
	if t.Index == nil {
		errs = append(errs, fmt.Errorf("pipeline: %s target %q has no index", role, t.Name))
	}
	if t.Embedder == nil {
		errs = append(errs, fmt.Errorf("pipeline: %s target %q has no embedder", role, t.Name))
	}
	return errors.Join(errs...)
}

// DeadLetters keeps messages that can never be applied, with the reason.
type DeadLetters interface {
	Put(ctx context.Context, m cdc.Record, cause error) error
}
