package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// comparison is the fleet's index against a fresh load of the final state.
type comparison struct {
	documents, chunks int64 // in the fleet's index
	freshDocuments    int64
	freshChunks       int64
	// docsDiffer counts documents (id, and version for the live ones) in one and not the
	// other, either way; chunksDiffer chunks (document, position, content
	// hash) likewise; vectorsDiffer chunks at the same place whose vectors
	// differ.
	docsDiffer, chunksDiffer, vectorsDiffer int64
	// doubled counts chunk places held by more than one row.
	doubled int64
}

func (c comparison) differs() bool {
	return c.docsDiffer+c.chunksDiffer+c.vectorsDiffer+c.doubled > 0 || c.documents != c.freshDocuments || c.chunks != c.freshChunks
}

// freshLoad loads the final state in one process, unlimited: `serve
// --once` over the whole topic, then the backfill, into rc.schema; and
// compares the fleet's schema with it.
func (w *world) freshLoad(ctx context.Context, conn *pgx.Conn, rc runConfig, fleetSchema string) (comparison, error) {
	srv, closeSrv := w.fake(false)
	defer closeSrv()
	rc.baseURL = srv.URL
	logf("fresh load of the final state into %s", rc.schema)
	p, err := w.start("fresh-serve", w.yaml(rc, ""), "", "serve", "--once")
	if err != nil {
		return comparison{}, err
	}
	err = p.wait(ctx, w.o.drainTimeout)
	p.stop()
	if err != nil {
		return comparison{}, fmt.Errorf("fresh load: %w", err)
	}
	b, err := w.backfill(rc, "fresh")
	if err != nil {
		return comparison{}, err
	}
	err = b.wait(ctx, w.o.drainTimeout)
	b.stop()
	if err != nil {
		return comparison{}, fmt.Errorf("fresh load: %w", err)
	}
	return compare(ctx, conn, fleetSchema, rc.schema)
}

// compare counts the differences between the index "fleet" in schemas a
// (the fleet's) and b (the fresh load).
func compare(ctx context.Context, conn *pgx.Conn, a, b string) (comparison, error) {
	var c comparison
	qa, qb := pgx.Identifier{a}.Sanitize(), pgx.Identifier{b}.Sanitize()
	// A live document's version is its change's position, the same in
	// both loads; a backfilled row's is the snapshot's WAL position, which
	// differs between two backfills of the same rows.
	docs := func(s string) string {
		return "SELECT id, CASE WHEN source_table = 'public.articles' THEN version END FROM " + s + ".documents WHERE index_name = 'fleet' AND deleted_at IS NULL"
	}
	chunks := func(s string) string {
		return "SELECT doc_id, position, content_hash FROM " + s + ".chunks WHERE index_name = 'fleet'"
	}
	for _, q := range []struct {
		dst *int64
		sql string
	}{
		{&c.documents, "SELECT count(*) FROM (" + docs(qa) + ") x"},
		{&c.freshDocuments, "SELECT count(*) FROM (" + docs(qb) + ") x"},
		{&c.chunks, "SELECT count(*) FROM (" + chunks(qa) + ") x"},
		{&c.freshChunks, "SELECT count(*) FROM (" + chunks(qb) + ") x"},
		{&c.docsDiffer, "SELECT (SELECT count(*) FROM (" + docs(qa) + " EXCEPT ALL " + docs(qb) + ") x) + (SELECT count(*) FROM (" + docs(qb) + " EXCEPT ALL " + docs(qa) + ") y)"},
		{&c.chunksDiffer, "SELECT (SELECT count(*) FROM (" + chunks(qa) + " EXCEPT ALL " + chunks(qb) + ") x) + (SELECT count(*) FROM (" + chunks(qb) + " EXCEPT ALL " + chunks(qa) + ") y)"},
		{&c.vectorsDiffer, "SELECT count(*) FROM " + qa + ".chunks x JOIN " + qb + ".chunks y USING (index_name, doc_id, position) WHERE x.index_name = 'fleet' AND x.embedding::text <> y.embedding::text"},
		{&c.doubled, "SELECT count(*) FROM (SELECT doc_id, position FROM " + qa + ".chunks WHERE index_name = 'fleet' GROUP BY 1, 2 HAVING count(*) > 1) x"},
	} {
		if err := conn.QueryRow(ctx, q.sql).Scan(q.dst); err != nil {
			return c, fmt.Errorf("compare the indexes: %w", err)
		}
	}
	return c, nil
}
