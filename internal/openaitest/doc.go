// Package openaitest serves a fake of OpenAI's embeddings API over HTTP for
// tests: real JSON on a real socket, deterministic vectors (from
// embedder.Hashing), request counters, and injectable faults (429 with
// Retry-After, 5xx, slow replies, dropped connections, wrong dimensions,
// too many inputs). It is the only fake DESIGN.md allows.
package openaitest
