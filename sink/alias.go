package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/internal/suggest"
)

// Index states (indexes.state, migration 00009). "live" is not stored: it
// is the target of an alias, or the configured index when no alias names
// it.
const (
	StateBuilding = "building"
	StateCaughtUp = "caught-up"
	StateRetired  = "retired"
)

var (
	// ErrNoIndex means a name is neither an alias nor a registered index.
	ErrNoIndex error = &permanentError{"no such index"}
	// ErrBuilding means promote was asked for an index that reindex has
	// not finished (state building).
	ErrBuilding error = &permanentError{"index is still building"}
	// ErrNoPrevious means rollback found no alias, or no previous index to
	// move it back to.
	ErrNoPrevious error = &permanentError{"no previous index to roll back to"}
)

// IndexInfo is one row of the indexes table.
type IndexInfo struct {
	Name       string
	Model      string
	Dimensions int
	State      string
	// Follows is the alias or index whose changes serve also writes here;
	// empty for a plain index.
	Follows string
	// DualWriteSince is when a serve first wrote a change here beside its
	// primary; nil until then.
	DualWriteSince *time.Time
	// Family is the alias (or plain index name) the index belongs to:
	// recorded when reindex --to claims it and by every promote and
	// rollback. Empty when no family claimed it.
	Family string
	// FullText is whether the index's chunks carry a tsvector.
	FullText bool
	// Type is how the index stores and indexes its vectors (TypeVector
	// for an index created before vector types existed).
	Type VectorType
	// HNSW are its HNSW parameters, pgvector's defaults filled in.
	HNSW HNSW
	// Candidates is how many candidates a bit index's search re-ranks as
	// recorded; 0 is DefaultCandidates(k). Always 0 for the other types.
	Candidates int
}

// Alias is one row of the aliases table.
type Alias struct {
	Name, Index string
	// Previous is the index a rollback moves the alias back to; empty when
	// there is none (never switched, or the index was dropped).
	Previous   string
	SwitchedAt time.Time
}

// Resolved is what a name in index: stands for.
type Resolved struct {
	// Alias is the alias row when the name is an alias; nil for an index.
	Alias *Alias
	// Index is the physical index the name resolves to.
	Index IndexInfo
}

// Catalog reads and changes the aliases and index states of one schema. It
// does not own the pool. Safe for concurrent use; promote and rollback of
// one alias serialize on an advisory lock.
type Catalog struct {
	pool                               *pgxpool.Pool
	schema                             string
	tIndexes, tAliases, tChunks, tDocs string
}

// NewCatalog returns the catalog of schema (migrated to 00009 or later).
func NewCatalog(pool *pgxpool.Pool, schema string) *Catalog {
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	return &Catalog{pool: pool, schema: schema, tIndexes: q("indexes"), tAliases: q("aliases"), tChunks: q("chunks"), tDocs: q("documents")}
}

type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const indexCols = "name, model, dimensions, state, coalesce(follows, ''), dual_write_since, coalesce(family, ''), full_text," +
	" vector_type, coalesce(hnsw_m, 0), coalesce(hnsw_ef_construction, 0), coalesce(hnsw_ef_search, 0), coalesce(rerank_candidates, 0)"

func scanIndex(r pgx.Row) (IndexInfo, error) {
	var x IndexInfo
	err := r.Scan(&x.Name, &x.Model, &x.Dimensions, &x.State, &x.Follows, &x.DualWriteSince, &x.Family, &x.FullText,
		&x.Type, &x.HNSW.M, &x.HNSW.EfConstruction, &x.HNSW.EfSearch, &x.Candidates)
	x.HNSW = x.HNSW.WithDefaults()
	if x.Type != TypeBit {
		x.Candidates = 0
	}
	return x, err
}

func (c *Catalog) index(ctx context.Context, q rowQuerier, name string) (IndexInfo, bool, error) {
	x, err := scanIndex(q.QueryRow(ctx, "SELECT "+indexCols+" FROM "+c.tIndexes+" WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
		return IndexInfo{}, false, nil
	}
	return x, err == nil, err
}

func (c *Catalog) alias(ctx context.Context, q rowQuerier, name string, lock bool) (*Alias, error) {
	sql := "SELECT name, index_name, coalesce(previous, ''), coalesce(switched_at, 'epoch') FROM " + c.tAliases + " WHERE name = $1"
	if lock {
		sql += " FOR UPDATE"
	}
	var a Alias
	err := q.QueryRow(ctx, sql, name).Scan(&a.Name, &a.Index, &a.Previous, &a.SwitchedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// Resolve applies the resolution rule every command uses for index:: name
// is an alias if an alias of that name exists (even when an index carries
// the same name: the alias wins), else an index. found is false when it is
// neither; a new index name is then registered by OpenIndex.
func (c *Catalog) Resolve(ctx context.Context, name string) (r Resolved, found bool, err error) {
	a, err := c.alias(ctx, c.pool, name, false)
	if err != nil {
		return Resolved{}, false, fmt.Errorf("resolve %s: %w", name, hintMigrate(err, c.schema))
	}
	target := name
	if a != nil {
		target = a.Index
	}
	x, ok, err := c.index(ctx, c.pool, target)
	if err != nil {
		return Resolved{}, false, fmt.Errorf("resolve %s: %w", name, err)
	}
	if a != nil && !ok {
		// The FK forbids it; only a hand edit gets here.
		return Resolved{}, false, fmt.Errorf("resolve %s: alias names index %q, which does not exist", name, target)
	}
	return Resolved{Alias: a, Index: x}, ok, nil
}

// Indexes lists every index, by name.
func (c *Catalog) Indexes(ctx context.Context) ([]IndexInfo, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+indexCols+" FROM "+c.tIndexes+" ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexInfo, error) { return scanIndex(r) })
}

// Aliases lists every alias, by name.
func (c *Catalog) Aliases(ctx context.Context) ([]Alias, error) {
	rows, err := c.pool.Query(ctx, "SELECT name, index_name, coalesce(previous, ''), coalesce(switched_at, 'epoch') FROM "+c.tAliases+" ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list aliases: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alias, error) {
		var a Alias
		err := r.Scan(&a.Name, &a.Index, &a.Previous, &a.SwitchedAt)
		return a, err
	})
}

// Follow marks index as a member of family (an alias, or the plain index
// the alias will be named after) in state: serve dual-writes every change
// of the family to it from its next poll.
func (c *Catalog) Follow(ctx context.Context, index, family, state string) error {
	tag, err := c.pool.Exec(ctx, "UPDATE "+c.tIndexes+" SET follows = $2, state = $3, family = $2 WHERE name = $1", index, family, state)
	if err != nil {
		return fmt.Errorf("follow %s: %w", family, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("follow %s: %w: %q", family, ErrNoIndex, index)
	}
	return nil
}

// Shadows are the indexes serve writes beside primary: every other index
// whose follows names family, whatever its state (building and caught-up
// to keep up; retired so that a rollback is instant and lossless).
func (c *Catalog) Shadows(ctx context.Context, primary, family string) ([]IndexInfo, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+indexCols+" FROM "+c.tIndexes+" WHERE follows = $1 AND name <> $2 ORDER BY name", family, primary)
	if err != nil {
		return nil, fmt.Errorf("list shadows of %s: %w", family, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexInfo, error) { return scanIndex(r) })
}

// MarkDualWrite records that a serve now writes every change to index
// (the first time only): reindex waits for it before its second pass.
func (c *Catalog) MarkDualWrite(ctx context.Context, index string) error {
	_, err := c.pool.Exec(ctx, "UPDATE "+c.tIndexes+" SET dual_write_since = coalesce(dual_write_since, now()) WHERE name = $1", index)
	if err != nil {
		return fmt.Errorf("mark dual-write of %s: %w", index, err)
	}
	return nil
}

// Promote points alias at index in one transaction, together with its view
// (<alias>_chunks) and the states: index becomes the live one, the old
// target retired (still dual-written, so Rollback loses nothing). Without
// an alias row yet, the previous target is the index that carries the
// alias's name, if any. It refuses an index still building unless force.
func (c *Catalog) Promote(ctx context.Context, alias, index string, force bool) (Alias, error) {
	if !indexNameRE.MatchString(alias) {
		// It names the view <alias>_chunks too.
		return Alias{}, fmt.Errorf("promote %q: an alias must match [a-z][a-z0-9_]{0,40}", alias)
	}
	var out Alias
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
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
		if err := c.checkPromote(ctx, tx, alias, x, force); err != nil {
			return err
		}
		if x.State == StateBuilding && !force {
			return fmt.Errorf("%w: %q has not caught up (ragsync reindex --to %s sets it caught-up when done; --force promotes it anyway)", ErrBuilding, index, index)
		}
		a, err := c.alias(ctx, tx, alias, true)
		if err != nil {
			return err
		}
		previous := ""
		switch {
		case a != nil && a.Index == index:
			out = *a
			return nil // already there
		case a != nil:
			previous = a.Index
		default:
			if _, ok, err := c.index(ctx, tx, alias); err != nil {
				return err
			} else if ok && alias != index {
				previous = alias
			}
		}
		out, err = c.move(ctx, tx, alias, index, previous, x.Dimensions, x.Type)
		return err
	})
	if err != nil {
		return Alias{}, wrapUnlessFamily(err, "promote %s to %s", alias, index)
	}
	return out, nil
}

// Rollback moves alias back to its previous index, with its view and the
// states, in one transaction.
func (c *Catalog) Rollback(ctx context.Context, alias string) (Alias, error) {
	var out Alias
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := lockDDL(ctx, tx, c.schema); err != nil {
			return err
		}
		a, err := c.alias(ctx, tx, alias, true)
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("%w: %q is not an alias (ragsync index promote creates one)", ErrNoPrevious, alias)
		}
		if a.Previous == "" {
			return fmt.Errorf("%w: alias %q points at %s and has no previous index (it was dropped, or the alias never moved)", ErrNoPrevious, alias, a.Index)
		}
		x, _, err := c.index(ctx, tx, a.Previous)
		if err != nil {
			return err
		}
		if x.Family != "" && x.Family != alias {
			return &FamilyError{Op: "index rollback", Index: x.Name, Family: alias, Owner: x.Family}
		}
		out, err = c.move(ctx, tx, alias, a.Previous, a.Index, x.Dimensions, x.Type)
		return err
	})
	if err != nil {
		return Alias{}, wrapUnlessFamily(err, "rollback %s", alias)
	}
	return out, nil
}

// move sets the alias row, the two states and the view inside tx, so a
// reader sees either the old target everywhere or the new one.
func (c *Catalog) move(ctx context.Context, tx pgx.Tx, alias, index, previous string, dims int, t VectorType) (Alias, error) {
	var prev *string
	if previous != "" {
		prev = &previous
	}
	var a Alias
	err := tx.QueryRow(ctx, "INSERT INTO "+c.tAliases+" (name, index_name, previous, switched_at) VALUES ($1, $2, $3, now())"+
		" ON CONFLICT (name) DO UPDATE SET index_name = EXCLUDED.index_name, previous = EXCLUDED.previous, switched_at = EXCLUDED.switched_at"+
		" RETURNING name, index_name, coalesce(previous, ''), switched_at", alias, index, prev).Scan(&a.Name, &a.Index, &a.Previous, &a.SwitchedAt)
	if err != nil {
		return Alias{}, err
	}
	// Every member of the family follows the alias: the live one is
	// excluded from serve's shadows by being its primary.
	if _, err := tx.Exec(ctx, "UPDATE "+c.tIndexes+" SET state = $2, follows = $3, family = $3 WHERE name = $1", index, StateCaughtUp, alias); err != nil {
		return Alias{}, err
	}
	if previous != "" {
		if _, err := tx.Exec(ctx, "UPDATE "+c.tIndexes+" SET state = $2, follows = $3, family = $3 WHERE name = $1", previous, StateRetired, alias); err != nil {
			return Alias{}, err
		}
	}
	// DROP + CREATE in one transaction: readers block on the view's lock
	// and then see the new definition; CREATE OR REPLACE cannot change the
	// embedding column's type (vector(D), halfvec(D)) when the dimensions
	// or the vector type change.
	view := pgx.Identifier{c.schema, AliasView(alias)}.Sanitize()
	if _, err := tx.Exec(ctx, "DROP VIEW IF EXISTS "+view); err != nil {
		return Alias{}, err
	}
	if _, err := tx.Exec(ctx, viewSQL("CREATE VIEW", view, c.schema, index, dims, t)); err != nil {
		return Alias{}, err
	}
	return a, nil
}

// AliasesTo lists the aliases whose target is index: it must not be
// dropped while any does.
func (c *Catalog) AliasesTo(ctx context.Context, index string) ([]string, error) {
	rows, err := c.pool.Query(ctx, "SELECT name FROM "+c.tAliases+" WHERE index_name = $1 ORDER BY name", index)
	if err != nil {
		return nil, fmt.Errorf("list aliases of %s: %w", index, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ServingHold is what HoldServing returns: the shared advisory locks that
// tell other commands a serve writes a family and its primary index. It is
// used from one goroutine (serve's family poll) and released once.
type ServingHold struct {
	cfg  *pgx.ConnConfig
	keys []any
	conn *pgx.Conn
}

// HoldServing marks, until Release, that a serve writes family with primary
// as its pipeline's index: shared advisory locks on a connection of its
// own, which ServeRunning and PrimaryInUse see. The locks end with the
// connection, so a serve that dies stops counting at once; Refresh takes
// them again over a new connection if the server ended the old one.
func (c *Catalog) HoldServing(ctx context.Context, family, primary string) (*ServingHold, error) {
	// A connection of its own, outside the pool: held for serve's
	// lifetime, it would take one of the pool's few connections away
	// from the pipeline's workers.
	h := &ServingHold{
		cfg:  c.pool.Config().ConnConfig.Copy(),
		keys: []any{lockKey("ragsync.serve", c.schema, family), lockKey("ragsync.primary", c.schema, primary)},
	}
	if err := h.lock(ctx); err != nil {
		return nil, fmt.Errorf("hold serving lock of %s: %w", family, err)
	}
	return h, nil
}

func (h *ServingHold) lock(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, h.cfg.Copy())
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1), pg_advisory_lock_shared($2)", h.keys...); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return err
	}
	h.conn = conn
	return nil
}

// Refresh checks that the locks' connection is alive and, when the server
// ended it (a terminated backend, an idle-session timeout, a restart),
// takes the locks again over a new one. Without it a reindex would see no
// serve from then on and skip waiting for dual-write (docs/reindex.md).
func (h *ServingHold) Refresh(ctx context.Context) error {
	if h.conn != nil && h.conn.Ping(ctx) == nil {
		return nil
	}
	if h.conn != nil {
		_ = h.conn.Close(context.WithoutCancel(ctx))
		h.conn = nil
	}
	if err := h.lock(ctx); err != nil {
		return fmt.Errorf("take the serving lock again: %w", err)
	}
	return nil
}

// Release ends the hold.
func (h *ServingHold) Release() {
	if h.conn == nil {
		return
	}
	// Unlocked before closing: the backend ends after Close returns, and a
	// reindex started right after must not see a serve.
	ctx := context.Background()
	_, _ = h.conn.Exec(ctx, "SELECT pg_advisory_unlock_shared($1), pg_advisory_unlock_shared($2)", h.keys...)
	_ = h.conn.Close(ctx)
	h.conn = nil
}

// ServeRunning reports whether a serve of family holds its serving lock
// (HoldServing), by trying the exclusive lock for a moment.
func (c *Catalog) ServeRunning(ctx context.Context, family string) (bool, error) {
	held, err := c.held(ctx, lockKey("ragsync.serve", c.schema, family))
	if err != nil {
		return false, fmt.Errorf("look for a running serve of %s: %w", family, err)
	}
	return held, nil
}

// PrimaryInUse reports whether a running serve writes index as its
// pipeline's index (HoldServing): dropping it would fail every write.
func (c *Catalog) PrimaryInUse(ctx context.Context, index string) (bool, error) {
	held, err := c.held(ctx, lockKey("ragsync.primary", c.schema, index))
	if err != nil {
		return false, fmt.Errorf("look for a serve writing %s: %w", index, err)
	}
	return held, nil
}

func (c *Catalog) held(ctx context.Context, key int64) (bool, error) {
	var free bool
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&free)
	})
	return !free, err
}
