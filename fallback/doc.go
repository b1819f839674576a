// Package fallback is the query front door: it takes retrieval queries from a
// Redis Stream, answers most of them from a Redis cache, lets exactly one of
// many identical misses reach the embedder and pgvector, rejects queries for
// unknown tenants or documents with a Bloom filter kept in Redis, and — when
// the embedder or pgvector keep failing — dead-letters the request and still
// answers it, degraded and marked so (stale cache, then full-text search,
// then an error with the reason). Every request gets exactly one reply.
//
// The wire protocol is documented in docs/frontdoor.md; Client
// speaks it from Go.
//
// fallback must not write to the index: it only reads through the Searcher
// it is given, and keeps its own state (cache, locks, Bloom bitmaps, the
// document → tenant map, streams) in Redis. The sink's changes reach that
// state through Changes, which serve makes the pipeline's observer.
package fallback
