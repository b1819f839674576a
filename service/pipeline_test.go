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

// TestPipelineNeedsAWholeTarget pins how every command hands the index to
// its pipeline: one target, an index (every write method required, the
// one-round-trip lookup among them) and its embedder. A composition that
// named only some optional stages once lost the lookup without any test
// noticing; now a target missing a part, the primary's or a shadow's,
// fails at once.
func TestPipelineNeedsAWholeTarget(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	ctx := context.Background()
	ix, err := service.OpenIndex(ctx, service.IndexConfig{URL: pgtest.URL(), Schema: schema, Index: "docs",
		Embedder: embedder.Config{Provider: "hashing", Dimensions: 16}.WithDefaults()}, nil, nil)
	require.NoError(t, err)
	t.Cleanup(ix.Close)

	events := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(`{"key":{"id":1},"value":{"op":"c","after":{"id":1,"body":"one paragraph of text"},`+
		`"source":{"connector":"postgresql","db":"app","schema":"public","table":"notes","lsn":100,"ts_ms":1700000000000}}}`+"\n"), 0o644))
	src, err := file.NewSource(file.Config{Path: events})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })

	cfg := service.PipelineConfig{Pipeline: pipeline.Config{Tables: []pipeline.TableConfig{{Match: "public.notes", Text: "{{body}}"}}}}
	_, err = service.NewPipeline(cfg, service.Stages{Source: src, Target: pipeline.Target{Name: ix.Name, Embedder: ix.Emb}}, nil, nil, nil)
	require.ErrorContains(t, err, "has no index", "a pipeline without an index has nowhere to write")
	_, err = service.NewPipeline(cfg, service.Stages{Source: src, Target: pipeline.Target{Name: ix.Name, Index: ix.Store}}, nil, nil, nil)
	require.ErrorContains(t, err, "has no embedder")
	_, err = service.NewPipeline(cfg, service.Stages{Source: src, Target: pipeline.Target{Name: ix.Name, Index: ix.Store, Embedder: ix.Emb},
		Shadows: []pipeline.Target{{Name: "half"}}}, nil, nil, nil)
	require.ErrorContains(t, err, `shadow target "half" has no index`, "a shadow is checked like the primary")
	p, err := service.NewPipeline(cfg, service.Stages{Source: src, Target: pipeline.Target{Name: ix.Name, Index: ix.Store, Embedder: ix.Emb}}, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, p.Run(ctx))
	n, err := sink.NewCatalog(pool, schema).LiveDocuments(ctx, "public.notes")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the target's index is written")
}
