package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/service"
)

func TestPipelineEmbedderCoalescesRemoteOnly(t *testing.T) {
	t.Parallel()
	cfg := Config{config.Default()}
	h := embedder.NewHashing(8)
	got, stop, err := service.PipelineEmbedder(cfg.EmbedderConfig(), h, nil, nil)
	require.NoError(t, err)
	stop()
	require.Same(t, h, got)

	cfg.Embedder = embedder.Config{Provider: "openai", Model: "m", Dimensions: 8, BaseURL: "http://127.0.0.1:1/v1"}
	o, err := embedder.NewOpenAI(cfg.Embedder)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	got, stop, err = service.PipelineEmbedder(cfg.EmbedderConfig(), o, reg, nil)
	require.NoError(t, err)
	defer stop()
	require.IsType(t, &embedder.Coalescer{}, got)
	n, err := testutil.GatherAndCount(reg, "ragsync_embedder_coalesced_requests_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
