// Package sink stores ragsync's index in Postgres with pgvector: it applies
// one document's chunk plan per transaction, fences every change by its
// source version, soft-deletes, and answers vector and full-text searches.
//
// All indexes share one set of tables (see package migrations), told apart
// by index name; each index is one embedding model at one output size and
// gets its own partial HNSW index, which New creates.
//
// The sink must not decide what to embed: callers ask Vectors which content
// hashes are already known and pass a nil Chunk.Vector for those.
package sink
