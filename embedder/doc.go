// Package embedder turns chunk texts into vectors: an OpenAI-compatible
// client (OpenAI, Azure OpenAI, Ollama, vLLM, TEI) with batching by count
// and tokens, Retry-After-aware retries and dimension checks, and Hashing,
// an offline deterministic embedder for tests, demos and air-gapped runs.
//
// It must not know about Postgres tables: what to embed is decided upstream
// (the planner diffs chunk hashes), where vectors go is the sink's business.
package embedder
