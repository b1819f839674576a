package embedder_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

func batchSetup(t *testing.T, opts openaitest.Options) (*embedder.BatchAPI, *openaitest.Server) {
	t.Helper()
	srv := openaitest.New(t, opts)
	api, err := embedder.NewBatchAPI(embedder.Config{Provider: "openai", BaseURL: srv.URL, Model: "text-embedding-3-small",
		Dimensions: dims, APIKey: "sk-test"})
	require.NoError(t, err)
	t.Cleanup(api.Close)
	return api, srv
}

func waitDone(t *testing.T, api *embedder.BatchAPI, id string) embedder.BatchInfo {
	t.Helper()
	for {
		bt, err := api.Retrieve(t.Context(), id)
		require.NoError(t, err)
		if embedder.BatchDone(bt.Status) {
			return bt
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBatchAPIRoundTrip(t *testing.T) {
	t.Parallel()
	api, _ := batchSetup(t, openaitest.Options{Batch: openaitest.BatchOptions{Processing: 50 * time.Millisecond}})
	reqs := []embedder.BatchRequest{{CustomID: "r1", Texts: []string{"alpha beta", "gamma"}}, {CustomID: "r2", Texts: []string{"delta"}}}
	fileID, err := api.Upload(t.Context(), "run-1.jsonl", reqs)
	require.NoError(t, err)
	found, ok, err := api.FindFile(t.Context(), "run-1.jsonl")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, fileID, found)
	_, ok, err = api.FindFile(t.Context(), "run-2.jsonl")
	require.NoError(t, err)
	require.False(t, ok)

	_, ok, err = api.FindBatch(t.Context(), fileID)
	require.NoError(t, err)
	require.False(t, ok, "no batch yet")
	bt, err := api.Create(t.Context(), fileID, "24h", map[string]any{"k": "v"})
	require.NoError(t, err)
	again, ok, err := api.FindBatch(t.Context(), fileID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, bt.ID, again.ID)

	bt = waitDone(t, api, bt.ID)
	require.Equal(t, embedder.BatchCompleted, bt.Status)
	res, err := api.Results(t.Context(), bt, map[string]int{"r1": 2, "r2": 1})
	require.NoError(t, err)
	require.Empty(t, res.Failed)
	want, err := embedder.NewHashing(dims).Embed(t.Context(), []string{"alpha beta", "gamma", "delta"})
	require.NoError(t, err)
	require.Equal(t, want[:2], res.Vectors["r1"])
	require.Equal(t, want[2:], res.Vectors["r2"])
}

// TestBatchAPIChecksVectors: a request whose vectors the online client
// would refuse (not finite, another size) fails alone; a request missing
// from the results fails too.
func TestBatchAPIChecksVectors(t *testing.T) {
	t.Parallel()
	api, srv := batchSetup(t, openaitest.Options{})
	srv.SetTransform(func(_, text string, v []float32) []float32 {
		switch text {
		case "nan":
			v[0] = float32(math.NaN())
		case "short":
			v = v[:3]
		}
		return v
	})
	fileID, err := api.Upload(t.Context(), "f.jsonl", []embedder.BatchRequest{
		{CustomID: "ok", Texts: []string{"fine"}}, {CustomID: "nan", Texts: []string{"x", "nan"}}, {CustomID: "short", Texts: []string{"short", "y"}}})
	require.NoError(t, err)
	bt, err := api.Create(t.Context(), fileID, "24h", nil)
	require.NoError(t, err)
	bt = waitDone(t, api, bt.ID)
	res, err := api.Results(t.Context(), bt, map[string]int{"ok": 1, "nan": 2, "short": 2, "missing": 1})
	require.NoError(t, err)
	require.Len(t, res.Vectors, 1)
	require.Len(t, res.Vectors["ok"], 1)
	require.Contains(t, res.Failed["nan"], "NaN")
	require.Contains(t, res.Failed["short"], "3-dimension")
	require.Contains(t, res.Failed["missing"], "no answer")
}

func TestBatchAPIFailedAndExpired(t *testing.T) {
	t.Parallel()
	api, srv := batchSetup(t, openaitest.Options{})
	srv.SetBatchHook(func(n int, ids []string) openaitest.BatchFault {
		return openaitest.BatchFault{FailLines: ids[:1], Expire: n == 1}
	})
	for n, want := range []string{embedder.BatchCompleted, embedder.BatchExpired} {
		fileID, err := api.Upload(t.Context(), fmt.Sprint(n), []embedder.BatchRequest{{CustomID: "a", Texts: []string{"x"}}, {CustomID: "b", Texts: []string{"y"}}})
		require.NoError(t, err)
		bt, err := api.Create(t.Context(), fileID, "24h", nil)
		require.NoError(t, err)
		bt = waitDone(t, api, bt.ID)
		require.Equal(t, want, bt.Status)
		res, err := api.Results(t.Context(), bt, map[string]int{"a": 1, "b": 1})
		require.NoError(t, err)
		if n == 1 {
			require.Contains(t, res.Failed["a"], "batch_expired")
			require.Contains(t, res.Failed["b"], "batch_expired")
		} else {
			require.Contains(t, res.Failed["a"], "status 500")
			require.Len(t, res.Vectors["b"], 1)
		}
	}
}

// TestBatchAPIFindBatchPages: the batch of a file is found past the first
// page of the provider's list.
func TestBatchAPIFindBatchPages(t *testing.T) {
	t.Parallel()
	api, _ := batchSetup(t, openaitest.Options{})
	var first string
	for i := range 130 {
		fileID, err := api.Upload(t.Context(), fmt.Sprint(i), []embedder.BatchRequest{{CustomID: "a", Texts: []string{"x"}}})
		require.NoError(t, err)
		bt, err := api.Create(t.Context(), fileID, "24h", nil)
		require.NoError(t, err)
		if i == 0 {
			first = fileID
		}
		_ = bt
	}
	bt, ok, err := api.FindBatch(t.Context(), first)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first, bt.InputFileID)
}

func TestBatchAPIRefuses(t *testing.T) {
	t.Parallel()
	_, err := embedder.NewBatchAPI(embedder.Config{Provider: "openai", APIType: "azure", BaseURL: "https://x.openai.azure.com", Model: "d", Dimensions: 8, APIKey: "k"})
	require.ErrorContains(t, err, "api_type azure is not supported by the batch lane")
	require.ErrorContains(t, err, "embedder.batch.enabled: false")
	_, err = embedder.NewBatchAPI(embedder.Config{Provider: "hashing", Dimensions: 8})
	require.ErrorContains(t, err, "embedder.batch.enabled: false")

	api, _ := batchSetup(t, openaitest.Options{Batch: openaitest.BatchOptions{Disabled: true}})
	_, err = api.Upload(t.Context(), "f", []embedder.BatchRequest{{CustomID: "a", Texts: []string{"x"}}})
	require.ErrorIs(t, err, embedder.ErrNoBatchAPI)
	require.ErrorContains(t, err, "embedder.batch.enabled: false")
	// An unknown id is not a missing API.
	api, _ = batchSetup(t, openaitest.Options{})
	_, err = api.Retrieve(t.Context(), "batch_nope")
	require.Error(t, err)
	require.False(t, errors.Is(err, embedder.ErrNoBatchAPI), "%v", err)
}

func TestBatchConfig(t *testing.T) {
	t.Parallel()
	base := embedder.Config{Provider: "openai", BaseURL: "http://localhost:1/v1", Model: "m", Dimensions: 8}
	c := base.WithDefaults()
	require.NoError(t, c.Validate())
	require.False(t, c.Batch.Enabled)
	require.Equal(t, 30*time.Second, c.Batch.PollInterval)
	require.Equal(t, "24h", c.Batch.CompletionWindow)
	require.Equal(t, 50_000, c.Batch.MaxRequestsPerFile)
	require.Equal(t, 50_000, c.Batch.MaxInputsPerFile)
	require.EqualValues(t, 200<<20, c.Batch.MaxFileBytes)
	for _, tc := range []struct {
		name string
		edit func(*embedder.Config)
		want string
	}{
		{"hashing", func(c *embedder.Config) { c.Provider, c.Model, c.Batch.Enabled = "hashing", "hashing-v1", true }, "embedder.batch.enabled: the batch lane needs provider"},
		{"azure", func(c *embedder.Config) { c.APIType, c.Batch.Enabled = "azure", true }, "embedder.batch.enabled: api_type azure"},
		{"window", func(c *embedder.Config) { c.Batch.CompletionWindow = "1h" }, "embedder.batch.completion_window"},
		{"poll", func(c *embedder.Config) { c.Batch.PollInterval = -time.Second }, "embedder.batch.poll_interval"},
		{"requests", func(c *embedder.Config) { c.Batch.MaxRequestsPerFile = 50_001 }, "embedder.batch.max_requests_per_file"},
		{"inputs", func(c *embedder.Config) { c.Batch.MaxInputsPerFile = -1 }, "embedder.batch.max_inputs_per_file"},
		{"bytes", func(c *embedder.Config) { c.Batch.MaxFileBytes = 300 << 20 }, "embedder.batch.max_file_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := c.WithDefaults().Validate()
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
		})
	}
}
