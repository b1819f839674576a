// Package backfill reads the rows of document-database tables directly and
// yields them as snapshot-read (op "r") changes, so that a backfill goes
// through the same pipeline as streamed changes: the same templates,
// chunking, embedding cache, near-duplicate reuse and sink. Rows are read
// and decoded by cdc/pgsnap, as the Postgres source's initial load reads
// them, so a row becomes the same document whichever reads it.
//
// Rows are read in pages by primary key (keyset, never OFFSET) inside one
// REPEATABLE READ transaction; every row carries a version at the snapshot's
// WAL position, chosen so that a streamed change committed after the snapshot
// always wins over it, and a change committed before it never does (see
// snapshot.go and docs/backfill.md for the argument). A checkpoint per table
// (kept by sink.Checkpoints) lets a killed backfill resume; it names the
// key columns and --where it belongs to, and a resume against others is
// refused. --where is checked up front to be one boolean expression that
// cannot change the paging condition. A table read whole in the run's
// snapshot is then reconciled with the index: its documents whose rows are
// gone are deleted through the pipeline, fenced by the snapshot's version
// (reconcile.go).
//
// It must not chunk, embed, run SQL on the index tables (it reads stored
// documents for re-indexing through sink), or write to the index itself,
// and it does not stream changes: that is the sources' job in package cdc.
package backfill
