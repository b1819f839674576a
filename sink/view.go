package sink

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SQL users read an index through a view rather than the shared tables:
// the view holds only the index's live documents (no soft-deleted ones),
// with their tenant and source table, and spells the HNSW index's
// expression and predicate so that "ORDER BY embedding <=> $1 LIMIT k" on it
// uses the HNSW index. Two kinds exist, named so they can never clash:
//
//   - <index>_index, one per index, created with the index and dropped with
//     it (IndexView);
//   - <alias>_chunks, one per alias, created by the first promote and moved
//     by every promote and rollback (AliasView).
//
// Names are at most 41 characters ([a-z][a-z0-9_]{0,40}), so neither
// suffix is ever truncated, and a name ending in "_index" never ends in
// "_chunks".

// IndexView is the name of index's own view (in the catalog's schema).
func IndexView(index string) string { return index + "_index" }

// AliasView is the name of alias's view, which follows the alias's target.
func AliasView(alias string) string { return alias + "_chunks" }

// lockDDL takes, until tx ends, the one lock every DDL statement on the
// index tables takes (registering an index, creating or dropping its HNSW
// index, a bulk load's drop and build, dropping an index, moving an alias
// and its view): two of them never interleave, and a command that needs
// one waits for the other to finish instead of failing on it.
func lockDDL(ctx context.Context, tx pgx.Tx, schema string) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey("ragsync.ddl", schema)); err != nil {
		return fmt.Errorf("take the index DDL lock of schema %s: %w", schema, err)
	}
	return nil
}

// ensureIndexView creates index's view if it is missing, under lockDDL.
func ensureIndexView(ctx context.Context, tx pgx.Tx, schema, index string, dims int) error {
	view := pgx.Identifier{schema, IndexView(index)}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", view).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	if _, err := tx.Exec(ctx, viewSQL(view, q("chunks"), q("documents"), index, dims)); err != nil {
		return fmt.Errorf("create view %s: %w", view, err)
	}
	return nil
}

// viewSQL is the CREATE VIEW of either kind: index's live chunks, with
// embedding cast to vector(dims) and the index name as a literal, exactly
// the HNSW index's expression and predicate (see hnswDDL, indexLit). index
// is a validated index name (no quoting needed in the literal).
func viewSQL(view, chunks, docs, index string, dims int) string {
	return fmt.Sprintf("CREATE VIEW %s AS SELECT c.id, c.doc_id, c.position, c.text, d.metadata, d.tenant, d.source_table, d.doc_key,"+
		" c.embedding::vector(%d) AS embedding"+
		" FROM %s c JOIN %s d ON d.index_name = c.index_name AND d.id = c.doc_id"+
		" WHERE c.index_name = '%s' AND d.deleted_at IS NULL", view, dims, chunks, docs, index)
}
