// Package pipeline wires the stages of ragsync: it takes batches of changes
// from a Source (decoded by the transport, or Debezium messages it decodes
// through its Decoder), turns each change into a document (text from a
// template over the row, metadata, tenant), chunks it, embeds only the
// chunks whose content hash has no stored vector, applies the result to the
// Sink one document per transaction, and acknowledges a source position once
// every change up to it was applied or dead-lettered.
//
// It owns ordering (changes to one document are applied in source order,
// one after another; a truncate after every earlier change of its table),
// the continuous flow (fetching while earlier changes are applied, work in
// flight bounded by its cost, back-pressure), retries of transient failures
// and acknowledgement (per lane, the contiguous prefix, after the commit
// hook). It does not parse Debezium JSON itself (package cdc does) and holds
// no SQL (package sink does).
package pipeline
