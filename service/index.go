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
	"github.com/ragsync/ragsync/monitor"
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
	// Chunker is the fingerprint of the chunker settings a writer cuts
	// with (PipelineConfig.fingerprint), recorded on the index and on its
	// shadows when opened for writing; a change is reported at open (see
	// sink.Store.ChunkerChange). "" for a command that does not chunk.
	Chunker string
	// Type, HNSW and Candidates are a new index's vector type, HNSW
	// parameters and bit re-rank candidates (index_type, hnsw:); "" and 0
	// leave an existing index's recorded ones (sink.Config).
	Type       sink.VectorType
	HNSW       sink.HNSW
	Candidates int
}

// Index is an opened index: its handle (Store, which carries the
// index's identity and implements the pipeline's write contract), the
// embedder built once from that identity, and the pool. Name is the
// physical index; Alias is the configured name when it is an alias, else
// "".
type Index struct {
	Emb   embedder.Client
	Store *sink.Store
	Pool  *pgxpool.Pool
	// Schema is the index schema (postgres.schema).
	Schema string
	Name   string
	Alias  string
	// sharedPool: the pool is another index's (a shadow's is its
	// primary's), which closes it.
	sharedPool bool
	// budget reads the remote embedder's provider budget for the monitor;
	// nil for the offline embedder.
	budget func() monitor.ProviderBudget
}

// Close releases the pool, if it has one of its own (a dry run's index
// that does not exist yet has none; a shadow shares its primary's).
func (ix *Index) Close() {
	if ix.Pool != nil && !ix.sharedPool {
		ix.Pool.Close()
	}
}

// Target is the index as a pipeline writes it: its handle and the
// embedder of its model. A pipeline that shares requests across documents
// replaces the embedder with a coalescer over it (PipelineEmbedder).
func (ix *Index) Target() pipeline.Target {
	return pipeline.Target{Name: ix.Name, Index: ix.Store, Embedder: ix.Emb}
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

// Open is the one way the service opens an index. It connects to
// Postgres and opens the configured name (index:, an index or an alias,
// which opens its target) in mode:
//
//   - sink.Read (query, dupes, monitor, backfill --dry-run) migrates
//     nothing, registers nothing and needs USAGE and SELECT only; an
//     unknown index: is an error naming the known ones.
//   - sink.Write and sink.Bulk migrate the schema (once, under the
//     migrations' lock) and register the index, refusing an unknown name
//     beside existing indexes unless cfg.Create (mayCreateAfter). Bulk
//     loads an empty index with COPY until Store.Finish (see sink.Bulk).
//
// The embedder is built once, from the index's identity (its model and
// dimensions as the index records them, or the config's for a new index),
// with the config's provider, endpoint and limits: one provider serves
// every index of a family. reg receives the embedder's and the sink's
// metrics; nil drops them.
func Open(ctx context.Context, cfg IndexConfig, mode sink.Mode, logger *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	if err := cfg.Embedder.Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.URL, cfg.Schema)
	if err != nil {
		return nil, err
	}
	if mode != sink.Read {
		if err := migrations.Up(ctx, pool, cfg.Schema, logger); err != nil {
			pool.Close()
			return nil, err
		}
	}
	ix, err := openOn(ctx, pool, cfg, mode, logger, reg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return ix, nil
}

// fingerprint is the fingerprint of the chunker settings the pipeline cuts
// with, which the writers record on the index (IndexConfig.Chunker).
func (c PipelineConfig) fingerprint() string { return c.Chunker.WithDefaults().Fingerprint() }

// openOn is Open on pool, whose schema the caller migrated (unless mode is
// sink.Read). The returned index shares pool: closing it closes pool.
func openOn(ctx context.Context, pool *pgxpool.Pool, cfg IndexConfig, mode sink.Mode, logger *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	// A new index takes the configured model and dimensions; an existing
	// one checks them (an alias's target has its own).
	id := cfg.Embedder.WithDefaults()
	sc := sink.Config{
		Mode:       mode,
		Schema:     cfg.Schema,
		Index:      cfg.Index,
		Model:      id.Model,
		Dimensions: id.Dimensions,
		Create:     cfg.Create,
		// Full text only where something reads it.
		SkipFullText: !cfg.FullText,
		Chunker:      cfg.Chunker,
		Type:         cfg.Type,
		HNSW:         cfg.HNSW,
		Candidates:   cfg.Candidates,
		Logger:       logger,
		Registerer:   reg,
	}
	st, err := openStore(ctx, pool, sc, logger)
	if err != nil {
		return nil, err
	}
	return newIndex(st, pool, cfg, logger, reg)
}

// openShadow opens index x, which follows the primary ix, on ix's pool
// with the config's embedder settings but x's identity: its model,
// dimensions, full-text setting, vector type and HNSW parameters (it
// passes none of the config's), so that opening a shadow never switches
// its full text on or off, nor fails on the config's index_type. Its metrics are not registered: the
// primary's are.
func openShadow(ctx context.Context, cfg IndexConfig, primary *Index, x sink.IndexInfo, logger *slog.Logger) (*Index, error) {
	st, err := openStore(ctx, primary.Pool, sink.Config{Mode: sink.Write, Schema: cfg.Schema, Index: x.Name, Physical: true, KeepFullText: true,
		Chunker: cfg.Chunker, Logger: logger}, logger)
	if err != nil {
		return nil, err
	}
	cfg.Index = x.Name
	ix, err := newIndex(st, primary.Pool, cfg, logger, nil)
	if err != nil {
		return nil, err
	}
	ix.sharedPool = true
	return ix, nil
}

// openStore opens the index handle. Like the migrations, registering the
// index survives a backend terminated under it; a registry can take the
// metrics once.
func openStore(ctx context.Context, pool *pgxpool.Pool, sc sink.Config, logger *slog.Logger) (*sink.Store, error) {
	if sc.Mode == sink.Read {
		return sink.OpenIndex(ctx, pool, sc)
	}
	var st *sink.Store
	err := migrations.RetryInterrupted(ctx, logger, "opening the index", func() error {
		var err error
		st, err = sink.OpenIndex(ctx, pool, sc)
		return err
	})
	var unknown *sink.UnknownIndexError
	if errors.As(err, &unknown) {
		// Refused beside existing indexes: the name may be a typo.
		return nil, withCreateHint(err)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// withCreateHint is err, an unknown name refused beside existing indexes,
// with the flag that creates the index anyway.
func withCreateHint(err error) error {
	return fmt.Errorf("%w; to start a new index beside them, run serve or backfill with --create-index", err)
}

// newIndex builds the embedder of handle st from its identity.
func newIndex(st *sink.Store, pool *pgxpool.Pool, cfg IndexConfig, logger *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	id := st.Identity()
	ec := withIdentity(cfg.Embedder, id.Model, id.Dimensions)
	ec.Logger = logger // its warnings go through the redactor like every line
	ec.Registerer = reg
	emb, err := embedder.New(ec)
	if err != nil {
		return nil, err
	}
	ix := &Index{Emb: emb, Store: st, Pool: pool, Schema: cfg.Schema, Name: id.Name, Alias: id.Alias}
	// A remote client draws on a provider budget, which the monitor reads
	// with the key's limits; the offline embedder has none.
	if b, ok := emb.(budgeted); ok {
		ix.budget = func() monitor.ProviderBudget { return providerBudget(b.Budget(), ec) }
	}
	return ix, nil
}

// budgeted is a client with a provider budget (*embedder.OpenAI).
type budgeted interface{ Budget() embedder.BudgetStatus }

var _ budgeted = (*embedder.OpenAI)(nil)

// mayCreateAfter is nil when err, a failed look-up of the configured index,
// says the index may be created: the schema is not migrated or holds no
// index or alias yet, or create (--create-index) says so. Beside existing
// indexes it is the *sink.UnknownIndexError of the read-only commands (its
// "did you mean"), with the flag that creates the index anyway; any other
// error is returned as it is. Writers open the index before they open a
// source, so a refused name consumes no change.
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
	return withCreateHint(err)
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
		sh, err := openShadow(ctx, cfg, ix, x, logger)
		if err != nil {
			return nil, fmt.Errorf("open %s, which follows %s: %w", x.Name, cfg.Index, err)
		}
		out = append(out, sh.Target())
	}
	return out, nil
}
