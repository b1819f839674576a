package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// Conformance of the concrete stages to the pipeline's interfaces.
var (
	_ pipeline.Sink        = (*sink.Store)(nil)
	_ pipeline.Splitter    = (*chunker.Chunker)(nil)
	_ pipeline.Decoder     = (*cdc.Decoder)(nil)
	_ pipeline.Source      = (*cdc.FileSource)(nil)
	_ pipeline.Source      = (*cdc.KafkaSource)(nil)
	_ pipeline.DeadLetters = (*cdc.FileDeadLetters)(nil)
	_ pipeline.DeadLetters = (*cdc.KafkaDeadLetters)(nil)
	_ pipeline.VectorCache = (*sink.Store)(nil)
	_ pipeline.Committer   = (*sink.Bulk)(nil)
)

// index is what a command that reads or writes the index opens: the
// embedder, the store and the store's pool. name is the physical index;
// alias is the alias index: named when it is one (see resolveIndex).
type index struct {
	emb         embedder.Client
	st          *sink.Store
	pool        *pgxpool.Pool
	name, alias string
}

// Close releases the pool.
func (ix *index) Close() { ix.pool.Close() }

// openIndex connects to Postgres, migrates the schema, resolves index:
// (resolveIndex), builds the embedder and registers the index. reg
// receives the sink's metrics; nil drops them.
func openIndex(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*index, error) {
	if err := cfg.embedderConfig().Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, pool, cfg.Postgres.Schema, logger); err != nil {
		pool.Close()
		return nil, err
	}
	var alias string
	err = migrations.RetryInterrupted(ctx, logger, "resolving index:", func() error {
		var err error
		cfg, alias, err = resolveIndex(ctx, cfg, sink.NewCatalog(pool, cfg.Postgres.Schema))
		return err
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	ec := cfg.embedderConfig()
	ec.Logger = logger // its warnings go through the redactor like every line
	ec.Registerer = reg
	emb, err := embedder.New(ec)
	if err != nil {
		pool.Close()
		return nil, err
	}
	var st *sink.Store
	// Like the migrations, registering the index survives a backend
	// terminated under it; a registry can take the metrics once.
	err = migrations.RetryInterrupted(ctx, logger, "opening the index", func() error {
		var err error
		st, err = sink.New(ctx, pool, sink.Config{
			Schema:     cfg.Postgres.Schema,
			Index:      cfg.Index,
			Model:      emb.Model(),
			Dimensions: emb.Dimensions(),
			// Full text only where something reads it.
			SkipFullText: !cfg.fullText(),
			Logger:       logger,
			Registerer:   reg,
		})
		return err
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &index{emb: emb, st: st, pool: pool, name: cfg.Index, alias: alias}, nil
}

// openIndexRead opens the configured index for a command that only reads
// (query, dupes, monitor, backfill --dry-run): it migrates nothing,
// registers nothing and needs USAGE and SELECT only. An unknown index: is
// an error naming the known ones. The embedder is built once, from the
// index's identity (model and dimensions as the index records them), with
// the config's provider, endpoint and limits.
func openIndexRead(ctx context.Context, cfg Config, logger *slog.Logger) (*index, error) {
	if err := cfg.embedderConfig().Validate(); err != nil {
		return nil, fmt.Errorf("embedder config: %w", err) // before connecting
	}
	pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
	if err != nil {
		return nil, err
	}
	st, id, err := sink.Open(ctx, pool, sink.Config{Schema: cfg.Postgres.Schema, Index: cfg.Index, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	alias := ""
	if id.Name != cfg.Index {
		alias = cfg.Index
	}
	cfg.Embedder.Model, cfg.Embedder.Dimensions = id.Model, id.Dimensions
	emb, err := embedder.New(cfg.embedderConfig())
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &index{emb: emb, st: st, pool: pool, name: id.Name, alias: alias}, nil
}

// resolveIndex applies the resolution rule to index:: when it names an
// alias, cfg is returned opened on the alias's target, with the target's
// model and dimensions from the indexes table (the rest of the embedder —
// provider, base_url, api_key, limits — stays the config's: one provider
// serves every index of a family), and alias is its name. Otherwise cfg is
// returned as it is and alias is empty.
func resolveIndex(ctx context.Context, cfg Config, cat *sink.Catalog) (Config, string, error) {
	r, found, err := cat.Resolve(ctx, cfg.Index)
	if err != nil || !found || r.Alias == nil {
		return cfg, "", err
	}
	alias := cfg.Index
	cfg.Index = r.Index.Name
	cfg.Embedder.Model = r.Index.Model
	cfg.Embedder.Dimensions = r.Index.Dimensions
	return cfg, alias, nil
}

// loadValid loads the configuration and checks it; needSource also checks
// the source section, which only serve uses.
func (g *globals) loadValid(needSource bool) (Config, error) {
	cfg, err := g.load()
	if err != nil {
		return cfg, err
	}
	if err := cfg.validate(needSource); err != nil {
		return cfg, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}

// source builds the configured source and its dead-letter destination.
// close releases both.
func newSource(cfg Config, once bool, logger *slog.Logger) (pipeline.Source, pipeline.DeadLetters, func(), error) {
	switch cfg.Source.Kind {
	case "file":
		// The source decodes each line (the pipeline's decoder then only
		// serves messages handed over as bytes).
		src, err := cdc.NewFileSource(cdc.FileConfig{Path: cfg.Source.File.Path, Follow: cfg.Source.File.Follow && !once,
			Decoder: cdc.NewDecoder(cfg.decoderConfig())})
		if err != nil {
			return nil, nil, nil, err
		}
		return src, cdc.NewFileDeadLetters(fileDLQPath(cfg), version), func() { src.Close() }, nil
	case "kafka":
		k := cfg.Source.Kafka
		src, err := cdc.NewKafkaSource(cdc.KafkaConfig{
			Brokers:        k.Brokers,
			Topics:         k.Topics,
			Group:          k.Group,
			MaxPollRecords: k.MaxPollRecords,
			MaxPollBytes:   k.MaxPollBytes,
			FetchMaxBytes:  k.FetchMaxBytes,
			SessionTimeout: k.SessionTimeout,
			RevokeTimeout:  k.RevokeTimeout,
			Decoder:        cdc.NewDecoder(cfg.decoderConfig()),
			StopAtEnd:      once,
			Logger:         logger.With("stage", "kafka"),
		})
		if err != nil {
			return nil, nil, nil, err
		}
		return src, cdc.NewKafkaDeadLetters(src.Client(), cfg.DLQ.Topic, version), src.Close, nil
	default:
		return nil, nil, nil, fmt.Errorf("source.kind: %q is not one of kafka, file", cfg.Source.Kind)
	}
}

// newPipeline wires every stage.
// store, when not nil, is the store st writes to: it receives each slice
// of a large document's new vectors as they are embedded
// (pipeline.embed_slice_chunks) and reads each document's stored state,
// chunks and cached hashes in one round trip. traces, when not nil, is
// told each change's trace id, apply time and failure (the monitor).
// commit, when not nil, is the buffering sink's flush the pipeline calls
// before acknowledging any source position (the bulk loader). pred, when
// not nil, is the reuse predictor the repayment shares.
func newPipeline(cfg Config, src pipeline.Source, dlq pipeline.DeadLetters, emb pipeline.Embedder, st pipeline.Sink, store *sink.Store, commit pipeline.Committer, traces pipeline.TraceRecorder, pred *pipeline.Predictor, reg prometheus.Registerer, logger *slog.Logger) (*pipeline.Pipeline, error) {
	// Not a nil *sink.Store in an interface, which would not compare nil.
	var cache pipeline.VectorCache
	var lookup pipeline.DocumentLookup
	if store != nil {
		cache, lookup = store, store
	}
	ch, err := chunker.New(cfg.chunkerConfig())
	if err != nil {
		return nil, err
	}
	// Near-duplicate reuse: a chunk whose vector is predicted to stay
	// within monitor.cosine_bound of a fresh one takes a stored vector
	// instead of a call, and the repayment replaces it later.
	pc := cfg.pipelineConfig(logger, reg)
	pc.Reuse = cfg.Reuse.pipeline(cfg.Monitor, pred)
	return pipeline.New(pc, pipeline.Stages{
		Source:      src,
		Decoder:     cdc.NewDecoder(cfg.decoderConfig()),
		Splitter:    ch,
		Embedder:    emb,
		Sink:        st,
		DeadLetters: dlq,
		Cache:       cache,
		Lookup:      lookup,
		Transient:   transient,
		Fatal:       fatal,
		Traces:      traces,
		Commit:      commit,
	})
}

// stallSettings names, per failing stage, what the stall summary tells the
// operator to check.
func stallSettings(cfg Config) map[string]string {
	m := map[string]string{
		pipeline.StageEmbedder: "embedder.base_url (is the embedding provider up and reachable?) and embedder.api_key",
		pipeline.StageSink:     "postgres.url (is Postgres up and reachable?)",
		pipeline.StageSource:   "source.kafka.brokers (is Kafka reachable?)",
	}
	if cfg.Embedder.Provider == embedder.ProviderHashing {
		m[pipeline.StageEmbedder] = "embedder.provider (the offline embedder failed; see the error)"
	}
	if cfg.Source.Kind == "file" {
		m[pipeline.StageDeadLetters] = "dlq.path (is its directory writable?)"
	} else {
		m[pipeline.StageDeadLetters] = "dlq.topic and source.kafka.brokers (can ragsync create and write the dead-letter topic?)"
	}
	return m
}

// transient says which failures mean "a dependency is down, wait for it"
// rather than "this message is bad": the pipeline retries those without
// limit, which stops fetching until the dependency is back.
func transient(err error) bool {
	if sink.Retryable(err) {
		return true
	}
	var api *embedder.APIError
	if errors.As(err, &api) {
		return !api.Permanent()
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded)
}

// fatal says which failures are configuration mistakes that every message
// would hit (wrong dimensions, bad key, unknown model): dead-lettering them
// one by one would empty the topic into the DLQ, so the pipeline stops and
// the error names the fix.
func fatal(err error) bool {
	if sink.Fatal(err) {
		return true // lost privilege, dropped table, read-only server
	}
	var dim *embedder.DimensionError
	var enc *embedder.EncodingError
	if errors.As(err, &dim) || errors.As(err, &enc) {
		return true
	}
	var api *embedder.APIError
	if errors.As(err, &api) {
		switch api.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return true
		}
	}
	return false
}
