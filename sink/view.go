package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// ensureIndexView creates index's view if it is missing, under lockDDL,
// and brings an existing one up to the current definition: a view created
// by an older release lacks the columns appended since (the provenance
// ones), and is replaced in place. The aliases that point to index have
// their views brought up the same way, since an application reads an
// alias's view. CREATE OR REPLACE keeps the view's privileges and
// whatever depends on it, and can only append columns, which is why new
// columns always go last.
func ensureIndexView(ctx context.Context, tx pgx.Tx, schema, index string, dims int, t VectorType) error {
	views := []string{IndexView(index)}
	rows, err := tx.Query(ctx, "SELECT name FROM "+pgx.Identifier{schema, "aliases"}.Sanitize()+" WHERE index_name = $1 ORDER BY name", index)
	if err != nil {
		return fmt.Errorf("list the aliases of %s: %w", index, err)
	}
	aliases, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list the aliases of %s: %w", index, err)
	}
	for _, a := range aliases {
		views = append(views, AliasView(a))
	}
	for i, name := range views {
		view := pgx.Identifier{schema, name}.Sanitize()
		var cols []string
		if err := tx.QueryRow(ctx, "SELECT coalesce((SELECT array_agg(attname::text) FROM pg_attribute"+
			" WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped), '{}')", view).Scan(&cols); err != nil {
			return fmt.Errorf("read the columns of view %s: %w", view, err)
		}
		switch {
		case len(cols) == 0 && i > 0:
			// An alias whose view is gone (dropped by hand): the next
			// promote creates it; nothing to upgrade here.
			continue
		case len(cols) == 0:
			if _, err := tx.Exec(ctx, viewSQL("CREATE VIEW", view, schema, index, dims, t)); err != nil {
				return fmt.Errorf("create view %s: %w", view, err)
			}
		case !hasAll(cols, viewColumnsOf(t)):
			if _, err := tx.Exec(ctx, viewSQL("CREATE OR REPLACE VIEW", view, schema, index, dims, t)); err != nil {
				return fmt.Errorf("add the columns %s to view %s: %w (if the view was changed by hand, drop it and start again: ragsync creates it)",
					strings.Join(missing(cols, viewColumnsOf(t)), ", "), view, err)
			}
		}
	}
	return nil
}

// viewColumns are the columns of the view, in order: CREATE OR REPLACE
// VIEW only appends columns, so a new one goes at the end. model and
// dimensions are the index's (every chunk of an index has its model's
// vector); the provenance columns after them are NULL on rows written
// before ragsync recorded provenance: unknown.
var viewColumns = []string{"id", "doc_id", "position", "text", "metadata", "tenant", "source_table", "doc_key", "embedding",
	"model", "dimensions", "model_version", "chunker", "source", "source_position", "committed_at", "trace_id"}

// viewColumnsOf are the view's columns for an index of type t: a bit
// index's view adds embedding_bit, its HNSW index's expression.
func viewColumnsOf(t VectorType) []string {
	if t == TypeBit {
		return append(slices.Clip(viewColumns), "embedding_bit")
	}
	return viewColumns
}

func hasAll(have, want []string) bool { return len(missing(have, want)) == 0 }

func missing(have, want []string) []string {
	var out []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

// viewSQL is the create statement (verb: CREATE VIEW or CREATE OR REPLACE
// VIEW) of either kind of view: index's live chunks, with embedding cast
// exactly as the HNSW index's expression of its type (see hnswExpr) and
// the index name as a literal, its predicate (see indexLit), so that
// "ORDER BY embedding <=> $1" on the view uses the HNSW index: vector(dims)
// for vector, halfvec(dims) for halfvec; a bit index's view has the full
// vector(dims) as embedding (to re-rank) and the quantized bit(dims) as
// embedding_bit (ORDER BY embedding_bit <~> binary_quantize($1) uses its
// HNSW index). index is a validated index name (no quoting needed in the
// literal). The model is read from the index's catalog row by an
// uncorrelated subquery, which Postgres runs once per query, so the view's
// plan (the HNSW scan) is the one without it.
func viewSQL(verb, view, schema, index string, dims int, t VectorType) string {
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	embedding := fmt.Sprintf("c.embedding::vector(%d) AS embedding", dims)
	extra := ""
	switch t {
	case TypeHalfvec:
		embedding = fmt.Sprintf("c.%s::halfvec(%d) AS embedding", halfColumn, dims)
	case TypeBit:
		extra = fmt.Sprintf(", binary_quantize(c.embedding)::bit(%d) AS embedding_bit", dims)
	}
	return fmt.Sprintf("%s %s AS SELECT c.id, c.doc_id, c.position, c.text, d.metadata, d.tenant, d.source_table, d.doc_key,"+
		" %s,"+
		" (SELECT i.model FROM %s i WHERE i.name = '%s') AS model, %d AS dimensions,"+
		" c.model_version, c.chunker, c.source, c.source_position, c.committed_at, c.trace_id%s"+
		" FROM %s c JOIN %s d ON d.index_name = c.index_name AND d.id = c.doc_id"+
		" WHERE c.index_name = '%s' AND d.deleted_at IS NULL", verb, view, embedding, q("indexes"), index, dims, extra, q("chunks"), q("documents"), index)
}
