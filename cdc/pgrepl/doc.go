// Package pgrepl streams row changes straight from a PostgreSQL logical
// replication slot (pgoutput) as cdc.Change values: the source for teams
// without Kafka, "point it at your document database".
//
// New checks the source first (wal_level, the role's privileges, the
// publication, every table's replica identity and document id, the slot)
// and creates the publication and the slot only once every check passed,
// dropping them again if a later step of the same start fails. It never
// publishes a table in a way that changes how the application's own
// statements behave. The first start loads the tables from the slot's
// exported snapshot; later starts load only tables that joined since, and
// resume a load that did not finish in the order it began.
//
// Values decode as the Debezium PostgreSQL connector's events decode
// through cdc.Decoder (its default settings), and each change is versioned
// by its transaction's commit LSN and its position in the transaction, so
// a snapshot row sorts before every change streamed after it. An update
// that changes the document id is a delete of the old document and a
// create of the new one, as Debezium emits it.
//
// The package must not know about chunks, embeddings or vectors, and does
// not write the index: it hands changes to the pipeline.
package pgrepl
