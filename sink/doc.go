// Package sink stores ragsync's index in Postgres with pgvector: it applies
// one document's chunk plan per transaction, fences every change by its
// source version, soft-deletes, and answers vector and full-text searches.
//
// All indexes share one set of tables (see package migrations), told apart
// by index name; each index is one embedding model at one output size and
// gets its own partial HNSW index, which OpenIndex creates. OpenIndex is
// the one way to open an index: by name or alias, in Read, Write or Bulk
// mode, returning a Store that carries the index's identity and implements
// the pipeline's whole write contract.
//
// The sink must not decide what to embed: callers ask Vectors which content
// hashes are already known and pass a nil Chunk.Vector for those, or a nil
// Vector with Chunk.VectorHash to take another text's cached vector (the
// pipeline's near-duplicate reuse; StoredChunks gives the origins to choose
// from). Every chunk row records the hash of the text its vector was
// computed from (vector_hash), and the embedding cache keeps that text, so a
// monitor can re-embed a sample of reused vectors and measure the distance.
//
// The sink owns every index table: besides documents, chunks and the cache,
// the catalog of indexes with their families and aliases (Catalog: the
// lifecycle rules of reindex, promote, rollback and drop live there), the
// backfill checkpoints (Checkpoints) and the monitor's state (MonitorState).
// Every DDL statement on an index takes one advisory lock per schema. Each
// index has the SQL view <index>_index, each alias <alias>_chunks (see
// IndexView). Read mode opens an existing index without creating anything.
//
// Growth is bounded by Purge: soft-deleted documents past a retention go
// with their chunks, cache entries unused past a longer retention go unless
// a chunk row still points at them. Dupes lists near-duplicate documents by
// their ssdeep hash (shingle similarity below ssdeep's 4096-byte minimum).
package sink
