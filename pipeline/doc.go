// Package pipeline wires the stages of ragsync: it takes batches of Debezium
// messages from a Source, decodes them, turns each change into a document
// (text from a template over the row, metadata, tenant), chunks it, embeds only
// the chunks whose content hash has no stored vector, applies the result to
// the Sink one document per transaction, and acknowledges the batch only after
// every change in it was applied or dead-lettered.
//
// It owns ordering (changes to one document are applied in source order, on
// one worker), concurrency across documents, retries of transient failures and
// offset commits. It does not parse Debezium JSON itself (package cdc does) and
// holds no SQL (package sink does).
package pipeline
