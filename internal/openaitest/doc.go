// Package openaitest serves a fake of OpenAI's embeddings API over HTTP for
// tests: real JSON on a real socket, deterministic vectors (from
// embedder.Hashing), request counters, and injectable faults (429 with
// Retry-After, 5xx, slow replies, dropped connections, wrong dimensions,
// too many inputs), an API key's rate limits enforced as a provider does
// (token buckets for requests and tokens per minute, 429 with Retry-After,
// x-ratelimit-* headers, and a log of what was accepted and refused),
// including misbehaviour: one vector of the wrong length, answers short,
// long or padded, and huge bodies; and OpenAI's Batch API for embeddings
// (files, batches, output and error files, with failed lines, failed or
// expired batches, and counters of what was submitted). It is the only
// fake the project's tests use for a remote service. It must not be
// imported by the service's own code: only tests and benchmarks use it.
package openaitest
