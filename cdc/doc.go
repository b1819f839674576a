// Package cdc decodes Debezium change events into Change values.
//
// Decoder turns one Message (a Kafka record, a replayed file line) into a
// Change: the operation, the "schema.table" it belongs to, a canonical
// document key, a Version that orders the changes of one document, and the
// row images with Debezium's logical types decoded into plain JSON values. It
// understands the JsonConverter "schema"+"payload" envelope, payload-only
// messages, rows flattened by ExtractNewRecordState, MongoDB's extended JSON,
// and the PostgreSQL, MySQL, SQL Server, Oracle and MongoDB source blocks.
// Messages that are not row changes (tombstones, transaction metadata, schema
// changes, heartbeats) come back as a *SkipError; malformed ones as a
// *DecodeError, which is permanent and names the message's coordinates.
//
// Sources hand over batches of messages with an acknowledgement: a Kafka
// consumer group and a JSON Lines file, whose Debezium messages the Decoder
// reads, and transports in rooms of their own (cdc/pgrepl streams a
// Postgres logical replication slot) that build Changes themselves with
// LookupTable, RowKey, TableName and ParseJSON, so their documents get the
// ids and values Debezium's events would give them.
//
// The package must not know about chunks, embeddings or vectors: it stops at
// the row. What a document's text is, and whether to embed it, is decided
// downstream.
package cdc
