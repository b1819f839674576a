// Package embedder turns chunk texts into vectors: an OpenAI-compatible
// client (OpenAI, Azure OpenAI, Ollama, vLLM, TEI) with batching by count
// and tokens, Retry-After-aware retries and dimension checks, and Hashing,
// an offline deterministic embedder for tests, demos and air-gapped runs.
//
// The client's requests pass a provider budget: the API key's requests and
// tokens per minute, held in Redis and shared by every process that uses
// the key when embedder.budget.redis_url is set (per process otherwise),
// with priority lanes (live, debt, backfill), a fleet-wide pause after a
// 429 and a bound on the requests in flight.
//
// It must not know about Postgres tables: what to embed is decided upstream
// (the planner diffs chunk hashes), where vectors go is the sink's business.
package embedder
