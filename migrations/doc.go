// Package migrations holds ragsync's versioned SQL schema, embedded with
// go:embed, and Up, which applies it to one Postgres schema.
//
// The SQL files use unqualified names and run with search_path set to the
// target schema (then public, where the vector extension lives), so the same
// files migrate the production schema ("ragsync") and one throwaway schema per
// test. Never edit a merged migration; add the next numbered file.
//
// The per-index HNSW indexes are not migrations: their dimensions vary by
// index, so sink.OpenIndex creates them.
package migrations
