package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// IndexConfig says which index a command opens and how its embedder is
// built: the configured name (an index or an alias, index:), the Postgres
// of the index, and the embedder's settings (provider, endpoint, limits;
// the model and dimensions are the index's own once it exists).
type IndexConfig struct {
	URL    string
	Schema string
	// Index is the configured name: an index, or an alias resolved to its
	// target when opened.
	Index    string
	Embedder embedder.Config
	// FullText writes each chunk's tsvector (postgres.full_text).
	FullText bool
	// Create lets a command that writes register the configured index in
	// a schema that holds other indexes already (--create-index). Without
	// it an index is created only where none exists yet: beside existing
	// ones, an unknown name is far more often a typo than a new index, and
	// a typo would apply the source's changes to an empty index the real
	// one never sees.
	Create bool
}

// Index is an opened index: its embedder, store and the store's pool.
// Name is the physical index; Alias is the configured name when it is an
// alias, else "".
type Index struct {
	Emb   embedder.Client
	Store *sink.Store
	Pool  *pgxpool.Pool
	// Schema is the index schema (postgres.schema).
	Schema string
	Name   string
	Alias  string
}

// Close releases the pool, if it has one (a dry run's index that does
// not exist yet has none).
func (ix *Index) Close() {
	if ix.Pool != nil {
		ix.Pool.Close()
	}
}

// withIdentity is ec built for an index's model and dimensions; the
// offline embedder has one model, which the config leaves unnamed.
func withIdentity(ec embedder.Config, model string, dims int) embedder.Config {
	if ec.Provider != embedder.ProviderHashing {
		ec.Model = model
	}
	ec.Dimensions = dims
	return ec
}

// OpenIndex connects to Postgres, migrates the schema (once, under the
// migrations' lock), resolves the configured name (an alias opens its
// target, with the target's model and dimensions; the rest of the
// embedder — provider, base_url, api_key, limits — stays the config's: one
// provider serves every index of a family), builds the embedder and
// registers the index. reg receives the embedder's and the sink's metrics;
// nil drops them.
func OpenIndex(ctx context.Context, cfg IndexConfig, logger *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	if err := cfg.Embedder.Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.URL, cfg.Schema)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, pool, cfg.Schema, logger); err != nil {
		pool.Close()
		return nil, err
	}
	ix, err := openIndex(ctx, pool, cfg, logger, reg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return ix, nil
}

// openIndex is OpenIndex on pool, whose schema the caller migrated.
func openIndex(ctx context.Context, pool *pgxpool.Pool, cfg IndexConfig, logger *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	name, alias, ec := cfg.Index, "", cfg.Embedder
	err := migrations.RetryInterrupted(ctx, logger, "resolving index:", func() error {
		cat := sink.NewCatalog(pool, cfg.Schema)
		r, found, err := cat.Resolve(ctx, cfg.Index)
		if err == nil && !found {
			return mayCreate(ctx, cat, cfg)
		}
		if err != nil || r.Alias == nil {
			return err
		}
		name, alias = r.Index.Name, cfg.Index
		ec = withIdentity(cfg.Embedder, r.Index.Model, r.Index.Dimensions)
		return nil
	})
	if err != nil {
		return nil, err
	}
	ec.Logger = logger // its warnings go through the redactor like every line
	ec.Registerer = reg
	emb, err := embedder.New(ec)
	if err != nil {
		return nil, err
	}
	var st *sink.Store
	// Like the migrations, registering the index survives a backend
	// terminated under it; a registry can take the metrics once.
	err = migrations.RetryInterrupted(ctx, logger, "opening the index", func() error {
		var err error
		st, err = sink.New(ctx, pool, sink.Config{
			Schema:     cfg.Schema,
			Index:      name,
			Model:      emb.Model(),
			Dimensions: emb.Dimensions(),
			// Full text only where something reads it.
			SkipFullText: !cfg.FullText,
			Logger:       logger,
			Registerer:   reg,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Index{Emb: emb, Store: st, Pool: pool, Schema: cfg.Schema, Name: name, Alias: alias}, nil
}

// mayCreate is nil when the configured index, which does not exist, may be
// created (mayCreateAfter).
func mayCreate(ctx context.Context, cat *sink.Catalog, cfg IndexConfig) error {
	if _, err := cat.Lookup(ctx, cfg.Index); err != nil {
		return mayCreateAfter(err, cfg.Create)
	}
	return nil // created meanwhile
}

// mayCreateAfter is nil when err, a failed look-up of the configured index,
// says the index may be created: the schema is not migrated or holds no
// index or alias yet, or create (--create-index) says so. Beside existing
// indexes it is the *sink.UnknownIndexError of the read-only commands (its
// "did you mean"), with the flag that creates the index anyway; any other
// error is returned as it is. Writers check it before they open a source,
// so a refused name consumes no change.
func mayCreateAfter(err error, create bool) error {
	var unknown *sink.UnknownIndexError
	switch {
	case errors.Is(err, sink.ErrNotMigrated):
		return nil
	case !errors.As(err, &unknown):
		return err
	case len(unknown.Known) == 0 || create:
		return nil
	}
	return fmt.Errorf("%w; to start a new index beside them, run serve or backfill with --create-index", err)
}

// OpenIndexRead opens the configured index for a command that only reads
// (query, dupes, monitor, backfill --dry-run): it migrates nothing,
// registers nothing and needs USAGE and SELECT only. An unknown index: is
// an error naming the known ones. The embedder is built once, from the
// index's identity (model and dimensions as the index records them), with
// the config's provider, endpoint and limits.
func OpenIndexRead(ctx context.Context, cfg IndexConfig, logger *slog.Logger) (*Index, error) {
	if err := cfg.Embedder.Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.URL, cfg.Schema)
	if err != nil {
		return nil, err
	}
	st, id, err := sink.Open(ctx, pool, sink.Config{Schema: cfg.Schema, Index: cfg.Index, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	alias := ""
	if id.Name != cfg.Index {
		alias = cfg.Index
	}
	emb, err := embedder.New(withIdentity(cfg.Embedder, id.Model, id.Dimensions))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Index{Emb: emb, Store: st, Pool: pool, Schema: cfg.Schema, Name: id.Name, Alias: alias}, nil
}

// openIndexOn opens index x on pool with the config's embedder settings
// but x's identity: its model, dimensions and full-text setting, so that
// opening a shadow never switches its full text on or off. The store's
// metrics are not registered: the primary's are.
func openIndexOn(ctx context.Context, cfg IndexConfig, pool *pgxpool.Pool, x sink.IndexInfo, logger *slog.Logger) (embedder.Client, *sink.Store, error) {
	ec := withIdentity(cfg.Embedder, x.Model, x.Dimensions)
	ec.Logger = logger
	emb, err := embedder.New(ec)
	if err != nil {
		return nil, nil, err
	}
	st, err := sink.New(ctx, pool, sink.Config{Schema: cfg.Schema, Index: x.Name, Model: emb.Model(), Dimensions: emb.Dimensions(),
		SkipFullText: !x.FullText, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	return emb, st, nil
}

// FamilyShadows opens the other indexes that follow the configured name
// (index:), for a command that writes ix once (backfill).
func FamilyShadows(ctx context.Context, cfg IndexConfig, ix *Index, logger *slog.Logger) ([]pipeline.Target, error) {
	infos, err := sink.NewCatalog(ix.Pool, cfg.Schema).Shadows(ctx, ix.Name, cfg.Index)
	if err != nil {
		return nil, err
	}
	var out []pipeline.Target
	for _, x := range infos {
		emb, st, err := openIndexOn(ctx, cfg, ix.Pool, x, logger)
		if err != nil {
			return nil, fmt.Errorf("open %s, which follows %s: %w", x.Name, cfg.Index, err)
		}
		out = append(out, pipeline.Target{Name: x.Name, Index: st, Embedder: emb})
	}
	return out, nil
}
