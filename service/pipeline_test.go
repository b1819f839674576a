package service_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// TestStoreIsTheSinkUnlessSaidOtherwise pins how serve hands the index to
// its pipeline: the Store alone, which is then both the sink and the
// one-round-trip lookup. A composition that named only a Sink lost the
// lookup once without any test noticing; with Store as the default sink,
// forgetting it leaves the pipeline without a sink, which fails at once.
func TestStoreIsTheSinkUnlessSaidOtherwise(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	ix, err := service.Open(ctx, service.IndexConfig{URL: pgtest.URL(), Schema: schema, Index: "docs",
		Embedder: embedder.Config{Provider: "hashing", Dimensions: 16}.WithDefaults()}, sink.Write, nil, nil)
	require.NoError(t, err)
	t.Cleanup(ix.Close)

	events := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(`{"key":{"id":1},"value":{"op":"c","after":{"id":1,"body":"one paragraph of text"},`+
		`"source":{"connector":"postgresql","db":"app","schema":"public","table":"notes","lsn":100,"ts_ms":1700000000000}}}`+"\n"), 0o644))
	src, err := file.NewSource(file.Config{Path: events})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })

	cfg := service.PipelineConfig{Pipeline: pipeline.Config{Tables: []pipeline.TableConfig{{Match: "public.notes", Text: "{{body}}"}}}}
	_, err = service.NewPipeline(cfg, service.Stages{Source: src, Embedder: ix.Emb}, nil, nil, nil)
	require.Error(t, err, "a pipeline with neither a store nor a sink has nowhere to write")
	p, err := service.NewPipeline(cfg, service.Stages{Source: src, Embedder: ix.Emb, Store: ix.Store}, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, p.Run(ctx))
	n, err := sink.NewCatalog(pool, schema).LiveDocuments(ctx, "public.notes")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the store is the sink")
}
