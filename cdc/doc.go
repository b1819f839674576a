// Package cdc decodes Debezium change events into Change values.
//
// Decoder turns one Record (a Kafka record, a replayed file line) into a
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
// Sources hand over batches of messages (Batch) with an acknowledgement.
// Each transport is a room of its own: cdc/kafka (a consumer group),
// cdc/redisstream (the streams Debezium Server's Redis sink writes, read in
// a consumer group) and cdc/file (a JSON Lines file) hand over Debezium
// messages, which the Decoder reads; cdc/pgrepl streams a Postgres logical replication slot and
// builds Changes itself with LookupTable, RowKey, TableName and ParseJSON,
// so its documents get the ids and values Debezium's events would give them.
//
// A message that cannot be decoded or applied becomes a dead letter: the
// original bytes with Kafka Connect's reason headers (DeadLetterHeaders),
// read back as a DeadLetter. Each transport stores its dead letters where
// it can replay them from.
//
// The package must not know about chunks, embeddings or vectors: it stops at
// the row. What a document's text is, and whether to embed it, is decided
// downstream.
package cdc
