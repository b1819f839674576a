package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/internal/suggest"
)

// An index family is an alias (or the plain index a future alias will be
// named after) with the indexes built for it: the live one, those being
// built or caught up, and the retired ones a rollback can return to. The
// rules below keep families apart, so that a typo in an index name cannot
// serve one family's documents under another's name. They are checked here,
// under lockDDL, where every command goes through them.

// FamilyError is a lifecycle operation refused because the index belongs
// to another family (or to none and already holds documents). It is
// permanent: retrying cannot change the answer, the operator must.
type FamilyError struct {
	// Op is the refused operation, as the user typed it ("reindex --to").
	Op string
	// Index is the index operated on; Family the family asking; Owner the
	// family the index belongs to (empty: none).
	Index, Family, Owner string
	// Documents is how many documents Index holds (deleted ones included).
	Documents int64
	// LiveOf is the alias whose live target Index is, when that is why.
	LiveOf string
	// Forcible is whether --force overrides the refusal.
	Forcible bool
}

func (e *FamilyError) Error() string {
	var b strings.Builder
	switch {
	case e.LiveOf != "":
		fmt.Fprintf(&b, "%s %s: it is the live index of alias %q, not of %q: its users would be served %s's documents", e.Op, e.Index, e.LiveOf, e.Family, e.Family)
	case e.Owner != "":
		fmt.Fprintf(&b, "%s %s: index %q belongs to family %q, not %q", e.Op, e.Index, e.Index, e.Owner, e.Family)
		if e.Documents > 0 {
			fmt.Fprintf(&b, " and holds %d documents", e.Documents)
		}
	default:
		fmt.Fprintf(&b, "%s %s: index %q holds %d documents and belongs to no family (ragsync reindex did not build it from %q)", e.Op, e.Index, e.Index, e.Documents, e.Family)
	}
	switch {
	case e.Op == "index rollback":
		fmt.Fprintf(&b, " (another family's reindex --to claimed it): rolling back would serve its documents under %s; promote an index of %s instead", e.Family, e.Family)
	case !e.Forcible:
		b.WriteString("; check the name")
	case e.Op == "index drop":
		b.WriteString("; check the name, or run it with that family's configuration (index:); --force drops it anyway")
	case e.Op == "index promote":
		b.WriteString("; check NEW and --alias; --force promotes it anyway when you really mean to merge the families")
	default:
		b.WriteString("; check --to; --force writes into it anyway when you really mean to merge them")
	}
	return b.String()
}

// Permanent marks the refusal as one a retry cannot fix.
func (e *FamilyError) Permanent() bool { return true }

// documents counts index's documents, deleted ones included (their
// versions fence, so they are content too).
func (c *Catalog) documents(ctx context.Context, q rowQuerier, index string) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, "SELECT count(*) FROM "+c.tDocs+" WHERE index_name = $1", index).Scan(&n)
	return n, err
}

// liveOf is an alias other than family whose live target index is.
func (c *Catalog) liveOf(ctx context.Context, q pgx.Tx, index, family string) (string, error) {
	var alias string
	err := q.QueryRow(ctx, "SELECT name FROM "+c.tAliases+" WHERE index_name = $1 AND name <> $2 ORDER BY name LIMIT 1", index, family).Scan(&alias)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return alias, err
}

// Claim makes index a member of family before reindex writes a document to
// it. It refuses, with a *FamilyError, the live index of another alias
// (always), and an index of another family or of none that already holds
// documents (unless force). An empty index, or one family already owns, is
// claimed. index must be registered (New).
func (c *Catalog) Claim(ctx context.Context, index, family string, force bool) error {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := lockDDL(ctx, tx, c.schema); err != nil {
			return err
		}
		x, ok, err := c.index(ctx, tx, index)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %q", ErrNoIndex, index)
		}
		if x.Family == family {
			return nil
		}
		ferr := &FamilyError{Op: "reindex --to", Index: index, Family: family, Owner: x.Family}
		if ferr.LiveOf, err = c.liveOf(ctx, tx, index, family); err != nil {
			return err
		} else if ferr.LiveOf != "" {
			return ferr
		}
		if ferr.Documents, err = c.documents(ctx, tx, index); err != nil {
			return err
		}
		if (x.Family != "" || ferr.Documents > 0) && !force {
			ferr.Forcible = true
			return ferr
		}
		_, err = tx.Exec(ctx, "UPDATE "+c.tIndexes+" SET family = $2 WHERE name = $1", index, family)
		return err
	})
	return wrapUnlessFamily(err, "claim %s for %s", index, family)
}

// wrapUnlessFamily wraps err with what failed, except a *FamilyError, which
// already says it.
func wrapUnlessFamily(err error, format string, args ...any) error {
	var ferr *FamilyError
	if err == nil || errors.As(err, &ferr) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// checkPromote refuses to make index the live target of alias when it is
// another alias's live target (always) or a member of another family
// (unless force). The index carrying the alias's name is the family's
// first index, whatever its recorded family.
func (c *Catalog) checkPromote(ctx context.Context, tx pgx.Tx, alias string, x IndexInfo, force bool) error {
	ferr := &FamilyError{Op: "index promote", Index: x.Name, Family: alias, Owner: x.Family}
	var err error
	if ferr.LiveOf, err = c.liveOf(ctx, tx, x.Name, alias); err != nil {
		return err
	} else if ferr.LiveOf != "" {
		return ferr
	}
	if x.Name == alias || x.Family == "" || x.Family == alias || force {
		return nil
	}
	ferr.Forcible = true
	return ferr
}

// DropResult is what Drop removed.
type DropResult struct {
	Documents int64
}

// Drop removes index with its documents, chunks, checkpoints, HNSW index
// and view (the embedding cache stays), for a command whose configured
// index: is family. It refuses the live target of any alias, the index a
// running serve writes (PrimaryInUse), the family's live index, and, unless
// force, an index of another family.
func (c *Catalog) Drop(ctx context.Context, index, family string, force bool) (DropResult, error) {
	if !indexNameRE.MatchString(index) {
		return DropResult{}, fmt.Errorf("index drop %q: not an index name (lower-case letters, digits and _, starting with a letter)", index)
	}
	targetOf, err := c.AliasesTo(ctx, index)
	if err != nil {
		return DropResult{}, err
	}
	if len(targetOf) > 0 {
		return DropResult{}, fmt.Errorf("index drop %s: it is the live target of alias %s; run ragsync index rollback %s, or ragsync index promote ANOTHER --alias %s, first",
			index, strings.Join(targetOf, ", "), targetOf[0], targetOf[0])
	}
	if inUse, err := c.PrimaryInUse(ctx, index); err != nil {
		return DropResult{}, err
	} else if inUse {
		return DropResult{}, fmt.Errorf("index drop %s: a running serve writes to it (it started before the last promote or rollback); restart serve first: it then writes the alias's target", index)
	}
	if r, found, err := c.Resolve(ctx, family); err != nil {
		return DropResult{}, err
	} else if found && r.Index.Name == index {
		return DropResult{}, fmt.Errorf("index drop %s: it is the configured index (index:); point index: at another index first", index)
	}
	var out DropResult
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := lockDDL(ctx, tx, c.schema); err != nil {
			return err
		}
		x, ok, err := c.index(ctx, tx, index)
		if err != nil {
			return err
		}
		if !ok {
			known, err := c.names(ctx)
			if err != nil {
				return err
			}
			return &UnknownIndexError{Name: index, Schema: c.schema, Known: known, Nearest: suggest.Nearest(index, known)}
		}
		if out.Documents, err = c.documents(ctx, tx, index); err != nil {
			return err
		}
		if x.Family != "" && x.Family != family && !force {
			return &FamilyError{Op: "index drop", Index: index, Family: family, Owner: x.Family, Documents: out.Documents, Forcible: true}
		}
		// The views read chunks and documents: gone first.
		if _, err := tx.Exec(ctx, "DROP VIEW IF EXISTS "+pgx.Identifier{c.schema, IndexView(index)}.Sanitize()); err != nil {
			return err
		}
		// Chunks reference documents, documents the index: the cascade
		// removes both, and the checkpoints and monitor state; an alias's
		// previous pointer is set to NULL. An alias made the target
		// meanwhile fails the FK: nothing is dropped.
		if _, err := tx.Exec(ctx, "DELETE FROM "+c.tIndexes+" WHERE name = $1", index); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DROP INDEX IF EXISTS "+pgx.Identifier{c.schema, "chunks_hnsw_" + index}.Sanitize())
		return err
	})
	if err != nil {
		return DropResult{}, wrapUnlessFamily(err, "index drop %s", index)
	}
	return out, nil
}

// WaitDualWrite waits up to d for a serve to record that it writes every
// change to index too (MarkDualWrite); it returns when that happened, nil
// when no serve did within d.
func (c *Catalog) WaitDualWrite(ctx context.Context, index string, d time.Duration) (*time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		var since *time.Time
		if err := c.pool.QueryRow(ctx, "SELECT dual_write_since FROM "+c.tIndexes+" WHERE name = $1", index).Scan(&since); err != nil {
			return nil, fmt.Errorf("read dual-write state of %s: %w", index, err)
		}
		if since != nil || !time.Now().Before(deadline) {
			return since, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// IndexStats is one index with its sizes, for listing.
type IndexStats struct {
	IndexInfo
	// Documents counts the live (not deleted) documents.
	Documents int64
	// Chunks counts the chunks of live documents: what queries can find.
	Chunks int64
	// DeletedChunks counts the chunks soft-deleted documents still hold
	// (kept with their version fence until purge removes them).
	DeletedChunks int64
	// HNSWBytes is the size of the index's HNSW index, 0 while it has none.
	HNSWBytes int64
	CreatedAt time.Time
	// Aliases names the aliases pointing at the index (set by List).
	Aliases []string
}

// List is Stats with each index's aliases, and the aliases themselves.
// An alias's target is "live", and so is configured (index:) when it is an
// index no alias of that name covers: those are the indexes queries read,
// which the lifecycle commands refuse to drop. It reads only.
func (c *Catalog) List(ctx context.Context, configured string) ([]IndexStats, []Alias, error) {
	aliases, err := c.Aliases(ctx)
	if err != nil {
		return nil, nil, err
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		return nil, nil, err
	}
	named := map[string][]string{}
	configuredIsAlias := false
	for _, a := range aliases {
		named[a.Index] = append(named[a.Index], a.Name)
		configuredIsAlias = configuredIsAlias || a.Name == configured
	}
	for i := range stats {
		x := &stats[i]
		x.Aliases = named[x.Name]
		if len(x.Aliases) > 0 || (x.Name == configured && !configuredIsAlias) {
			x.State = "live"
		}
	}
	return stats, aliases, nil
}

// Stats lists every index with its sizes, by name. It reads only.
func (c *Catalog) Stats(ctx context.Context) ([]IndexStats, error) {
	rows, err := c.pool.Query(ctx, "SELECT i.name, i.model, i.dimensions, i.state, coalesce(i.follows, ''), i.dual_write_since, coalesce(i.family, ''), i.full_text,"+
		" i.vector_type, coalesce(i.hnsw_m, 0), coalesce(i.hnsw_ef_construction, 0), coalesce(i.hnsw_ef_search, 0), coalesce(i.rerank_candidates, 0), i.created_at,"+
		" (SELECT count(*) FROM "+c.tDocs+" d WHERE d.index_name = i.name AND d.deleted_at IS NULL),"+
		" (SELECT count(*) FILTER (WHERE d.deleted_at IS NULL) FROM "+c.tChunks+" ch JOIN "+c.tDocs+" d ON d.index_name = ch.index_name AND d.id = ch.doc_id WHERE ch.index_name = i.name),"+
		" (SELECT count(*) FILTER (WHERE d.deleted_at IS NOT NULL) FROM "+c.tChunks+" ch JOIN "+c.tDocs+" d ON d.index_name = ch.index_name AND d.id = ch.doc_id WHERE ch.index_name = i.name),"+
		" coalesce(pg_relation_size(to_regclass(quote_ident($1) || '.' || quote_ident('chunks_hnsw_' || i.name))), 0)"+
		" FROM "+c.tIndexes+" i ORDER BY i.name", c.schema)
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", hintMigrate(err, c.schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexStats, error) {
		var x IndexStats
		err := r.Scan(&x.Name, &x.Model, &x.Dimensions, &x.State, &x.Follows, &x.DualWriteSince, &x.Family, &x.FullText,
			&x.Type, &x.HNSW.M, &x.HNSW.EfConstruction, &x.HNSW.EfSearch, &x.Candidates,
			&x.CreatedAt, &x.Documents, &x.Chunks, &x.DeletedChunks, &x.HNSWBytes)
		x.HNSW = x.HNSW.WithDefaults()
		if x.Type != TypeBit {
			x.Candidates = 0
		}
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	return out, nil
}
