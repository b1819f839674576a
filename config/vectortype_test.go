package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/sink"
)

// TestIndexTypeSettings: index_type and hnsw: load from the file, the
// environment and --set, and reach the sink as written (unset: "" and 0,
// so an existing index keeps its own).
func TestIndexTypeSettings(t *testing.T) {
	cfg, err := config.Load(writeFile(t, "embedder:\n  dimensions: 3072\nindex_type: halfvec\nhnsw:\n  m: 24\n  ef_construction: 128\n  ef_search: 100\n"), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(false))
	require.Equal(t, sink.TypeHalfvec, cfg.VectorType())
	require.Equal(t, sink.HNSW{M: 24, EfConstruction: 128, EfSearch: 100}, cfg.SinkHNSW())

	t.Setenv("RAGSYNC_INDEX_TYPE", "bit")
	t.Setenv("RAGSYNC_HNSW_RERANK_CANDIDATES", "400")
	cfg, err = config.Load("", []string{"hnsw.ef_search=64"})
	require.NoError(t, err)
	require.NoError(t, cfg.Validate(false))
	require.Equal(t, sink.TypeBit, cfg.VectorType())
	require.Equal(t, 400, cfg.HNSW.RerankCandidates)
	require.Equal(t, 64, cfg.SinkHNSW().EfSearch)
	require.Equal(t, "default", cfg.Index, "RAGSYNC_INDEX_TYPE is not RAGSYNC_INDEX")

	def := config.Default()
	require.Empty(t, def.VectorType(), "unset: a new index is vector, an existing one keeps its type")
	require.Equal(t, sink.HNSW{}, def.SinkHNSW())
}

// TestIndexTypeValidation: each mistake is named by its setting, with
// the fix.
func TestIndexTypeValidation(t *testing.T) {
	tests := []struct {
		name string
		set  func(*config.Config)
		want string
	}{
		{"unknown type", func(c *config.Config) { c.IndexType = "half" },
			`index_type: "half" is not one of vector (the default), halfvec, bit`},
		{"3072 dimensions on vector", func(c *config.Config) { c.Embedder.Dimensions = 3072 },
			"embedder.dimensions: 3072 is more than index_type vector allows (2000): set index_type: halfvec (up to 4000) or bit (up to 16000), or ask the model for fewer dimensions"},
		{"5000 dimensions on halfvec", func(c *config.Config) { c.Embedder.Dimensions, c.IndexType = 5000, "halfvec" },
			"embedder.dimensions: 5000 is more than index_type halfvec allows (4000): set index_type: bit (up to 16000)"},
		{"20000 dimensions on bit", func(c *config.Config) { c.Embedder.Dimensions, c.IndexType = 20000, "bit" },
			"embedder.dimensions: 20000 is more than index_type bit allows (16000): ask the model for fewer dimensions"},
		{"negative m", func(c *config.Config) { c.HNSW.M = -1 }, "hnsw.m: -1 must not be negative (0 means the default, 16)"},
		{"m too large", func(c *config.Config) { c.HNSW.M = 101 }, "hnsw.m: 101 must be 2..100"},
		{"negative ef_construction", func(c *config.Config) { c.HNSW.EfConstruction = -5 }, "hnsw.ef_construction: -5 must not be negative"},
		{"ef_construction under 2m", func(c *config.Config) { c.HNSW.M, c.HNSW.EfConstruction = 32, 40 },
			"hnsw.ef_construction: 40 must be at least twice hnsw.m (32): set it to 64 or more, or lower hnsw.m"},
		{"default ef_construction under 2m", func(c *config.Config) { c.HNSW.M = 48 },
			"hnsw.ef_construction: the default, 64, is less than twice hnsw.m (48): set hnsw.ef_construction to 96 or more"},
		{"negative ef_search", func(c *config.Config) { c.HNSW.EfSearch = -1 }, "hnsw.ef_search: -1 must not be negative (0 means the default, 40)"},
		{"ef_search too large", func(c *config.Config) { c.HNSW.EfSearch = 1001 }, "hnsw.ef_search: 1001 must be at most 1000"},
		{"negative candidates", func(c *config.Config) { c.HNSW.RerankCandidates, c.IndexType = -1, "bit" },
			"hnsw.rerank_candidates: -1 must not be negative"},
		{"candidates without bit", func(c *config.Config) { c.HNSW.RerankCandidates, c.IndexType = 300, "halfvec" },
			"hnsw.rerank_candidates: only an index_type bit index re-ranks candidates; remove it, or set index_type: bit"},
		{"candidates with the default type", func(c *config.Config) { c.HNSW.RerankCandidates = 300 },
			"hnsw.rerank_candidates: only an index_type bit index re-ranks candidates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			tc.set(&cfg)
			require.ErrorContains(t, cfg.Validate(false), tc.want)
		})
	}
	ok := []func(*config.Config){
		func(c *config.Config) { c.Embedder.Dimensions, c.IndexType = 2000, "vector" },
		func(c *config.Config) { c.Embedder.Dimensions, c.IndexType = 4000, "halfvec" },
		func(c *config.Config) { c.Embedder.Dimensions, c.IndexType = 16000, "bit" },
		func(c *config.Config) { c.HNSW = config.HNSWConfig{M: 48, EfConstruction: 96, EfSearch: 1000} },
		func(c *config.Config) { c.IndexType, c.HNSW.RerankCandidates = "bit", 500 },
	}
	for i, set := range ok {
		cfg := config.Default()
		set(&cfg)
		require.NoError(t, cfg.Validate(false), "case %d", i)
	}
}
