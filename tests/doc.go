// Package tests holds end-to-end tests: they build the ragsync binary and run
// it as a separate process against real Postgres with pgvector and Kafka
// through franz-go's in-process kfake cluster. Only the embedding API may be
// faked; these tests use the offline hashing embedder. They must share no
// schema, slot or Redis prefix with another test, and clean up after
// themselves.
package tests
