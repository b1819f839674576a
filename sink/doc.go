// Package sink stores ragsync's index in Postgres with pgvector: it applies
// one document's chunk plan per transaction, fences every change by its
// source version, soft-deletes, and answers vector and full-text searches.
//
// All indexes share one set of tables (see package migrations), told apart
// by index name; each index is one embedding model at one output size and
// gets its own partial HNSW index, which New creates.
//
// The sink must not decide what to embed: callers ask Vectors which content
// hashes are already known and pass a nil Chunk.Vector for those, or a nil
// Vector with Chunk.VectorHash to take another text's cached vector (the
// pipeline's near-duplicate reuse; StoredChunks gives the origins to choose
// from). Every chunk row records the hash of the text its vector was
// computed from (vector_hash), and the embedding cache keeps that text, so a
// monitor can re-embed a sample of reused vectors and measure the distance.
//
// Growth is bounded by Purge: soft-deleted documents past a retention go
// with their chunks, cache entries unused past a longer retention go unless
// a chunk row still points at them. Dupes lists near-duplicate documents by
// their ssdeep hash (shingle similarity below ssdeep's 4096-byte minimum).
package sink
