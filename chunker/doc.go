// Package chunker splits document text in chunks whose boundaries stay put
// under edits, and gives each chunk a SHA-256 hash of its normalised content.
//
// The hash is what the rest of ragsync keys on: the planner diffs a
// document's new chunk hashes against the stored ones, and the embedder's
// cache skips any (hash, model) it has embedded before. So Normalize and Hash
// are a storage contract: changing them re-embeds every index.
//
// The package is pure: it must not call the network, take a context or hold
// state between calls. Token counts use OpenAI's cl100k_base BPE, compiled
// into the binary, so counting works offline.
package chunker
